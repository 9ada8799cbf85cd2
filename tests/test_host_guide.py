"""The host guide's walk-through (docs/site/guides/host.md, its first Python block) runs as printed:
a laptop leaves mid-turn over WebSocket, a phone resumes with the cursor, and the update numbers
go on with no gap and no duplicate to the turn's end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).parent.parent / "docs" / "site" / "guides" / "host.md"


def test_the_guides_example_prints_every_number_once_across_the_two_clients(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("hypercorn")
    text = GUIDE.read_text(encoding="utf-8")
    program = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(program, str(GUIDE), "exec"), {"__name__": "guide_example"})  # ends with trio.run(main)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "phone: the turn ended (end_turn)"
    seen = [re.fullmatch(r"(laptop|phone) #(\d+): (\d+) ", line) for line in lines[:-1]]
    assert all(seen), lines
    who = [m.group(1) for m in seen if m]
    numbers = [int(m.group(2)) for m in seen if m]
    said = [int(m.group(3)) for m in seen if m]
    assert said == list(range(1, 31))  # each number the agent counted, once, in order
    assert numbers == list(range(2, 32))  # update 1 is the turn's running state
    assert "phone" in who and who == sorted(who)  # the laptop's, then the phone's: the switch is the only one
