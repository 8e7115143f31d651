"""A campaign's identities are kept redacted in the ledger, and still see every change."""

from __future__ import annotations

import json
from typing import Any

from quiver import Redactor
from quiver.experiments._campaign.identity import describe_change, stored_identity


def _identity(**set_: Any) -> dict[str, Any]:
    return {"op": "override", "node": "lookup", "occurrence": 0, "params": [{"set": set_}], "files": {},
            "pipeline": {"function": "run", "source": "/x/p.py", "source_sha256": "ab"}}


def test_a_secret_param_is_stored_redacted() -> None:
    stored = stored_identity(_identity(owner="jane.doe@example.com"), Redactor())
    assert "jane.doe@example.com" not in json.dumps(stored)
    assert stored["params"] == [{"set": {"owner": "[REDACTED:email]"}}]


def test_a_change_inside_a_redacted_value_is_a_change() -> None:
    redactor = Redactor()
    before = stored_identity(_identity(owner="jane.doe@example.com"), redactor)
    after = stored_identity(_identity(owner="john.roe@example.com"), redactor)
    assert before["params"] == after["params"] and before != after
    assert describe_change(before, after) == "a value of its parameters that the run redacts changed"


def test_a_visible_change_is_named_before_the_digest() -> None:
    redactor = Redactor()
    before = stored_identity(_identity(owner="jane.doe@example.com"), redactor)
    after = stored_identity(_identity(owner="jane.doe@example.com", tier="gold"), redactor)
    assert describe_change(before, after).startswith("params[0].set.tier: ")
    moved = stored_identity({**_identity(owner="jane.doe@example.com"),
                             "pipeline": {"function": "run", "source": "/elsewhere/p.py", "source_sha256": "ab"}},
                            redactor)
    assert describe_change(before, moved) == "nothing"  # a moved checkout is the same code
