"""An openai-agents order desk on the Responses API (see ``pipeline.py``)."""
