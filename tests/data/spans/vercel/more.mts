// More Vercel AI SDK span files for tests/data/spans/vercel/ (run by `generate.py vercel/more`).
//
//   npm install ai @ai-sdk/openai @opentelemetry/api @opentelemetry/sdk-trace-base \
//       @opentelemetry/resources @opentelemetry/context-async-hooks zod tsx
//   npx tsx more.mts SIMULATOR_URL        (e.g. http://127.0.0.1:8765/v1)
//
// Writes, for generateText with a tool (three steps) and a plain generateText:
// * tools.json_spans.json: the spans as the AI SDK's own test tracer records them
//   (MockTracer in ai/src/test/mock-tracer.ts, shipped in the package; `tracer.jsonSpans`,
//   what the SDK's snapshot tests store): name, attributes, events and status, with no
//   span, parent or trace id and no times;
// * by_operation.json: the OTel JS SDK's spans grouped into one list per span name
//   ({"ai.generateText": [...], "ai.generateText.doGenerate": [...], ...}), each span as
//   generate.mjs writes it, the way OpenInference's capture-v6-spans.ts writes its
//   spans-by-operation fixture.
import { writeFileSync } from "node:fs";
import { generateText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { context } from "@opentelemetry/api";
import { z } from "zod";
import { MockTracer } from "./node_modules/ai/src/test/mock-tracer.ts";

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());  // parents across awaits

const url = process.argv[2];
const here = new URL(".", import.meta.url).pathname;
const provider = createOpenAI({ baseURL: url, apiKey: "sk-test" });

const weather = (telemetry) => generateText({
  model: provider.chat("fixture-chat"), prompt: "How is the weather in Lyon?", stopWhen: stepCountIs(3),
  tools: {
    get_weather: tool({
      description: "The weather in a city.", inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => ({ city, sky: "sunny", temp_c: 19 }),
    }),
  },
  experimental_telemetry: telemetry,
});
const capital = (telemetry) => generateText({
  model: provider.chat("fixture-chat"), temperature: 0, system: "Answer in one sentence.",
  prompt: "What is the capital of France?", experimental_telemetry: telemetry,
});

const mock = new MockTracer();
await weather({ isEnabled: true, tracer: mock, functionId: "weather", metadata: { fixture: "weather" } });
writeFileSync(here + "tools.json_spans.json", JSON.stringify(mock.jsonSpans, null, 2) + "\n");

const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({
  resource: resourceFromAttributes({ "service.name": "span-fixtures" }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
const tracer = tracerProvider.getTracer("ai");
await capital({ isEnabled: true, tracer, functionId: "capital", metadata: { fixture: "capital" } });
await weather({ isEnabled: true, tracer, functionId: "weather", metadata: { fixture: "weather" } });
await tracerProvider.forceFlush();
const byOperation = {};
for (const span of exporter.getFinishedSpans()) {
  (byOperation[span.name] ??= []).push({
    name: span.name, kind: span.kind, spanContext: span.spanContext(),
    parentSpanContext: span.parentSpanContext, startTime: span.startTime, endTime: span.endTime,
    attributes: span.attributes, status: span.status, events: span.events, links: span.links,
    instrumentationScope: span.instrumentationScope,
  });
}
writeFileSync(here + "by_operation.json", JSON.stringify(byOperation, null, 2) + "\n");
console.log(`wrote tools.json_spans.json (${mock.jsonSpans.length} spans) and by_operation.json `
  + `(${exporter.getFinishedSpans().length} spans in ${Object.keys(byOperation).length} lists)`);
