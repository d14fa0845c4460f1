"""The CLI explains itself: each command has a description and an example, every option says what it
is (and its default), and the main help lists the user's commands apart from the workflow's stages."""

from __future__ import annotations

import argparse

from neuronsweep import cli


def test_every_command_describes_itself_with_an_example_and_every_option_has_help():
    ap = cli.parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(cli.COMMANDS)
    for name, p in sub.choices.items():
        text = p.format_help()
        assert cli.COMMANDS[name].description.split()[0] in text and "example:\n  neuronsweep " in text, name
        for action in p._actions:
            if action.help is not argparse.SUPPRESS:
                assert action.help, f"neuronsweep {name} {action.option_strings or action.dest}: no help"
    main = ap.format_help()
    listed = [n for n, c in cli.COMMANDS.items() if c.user]
    stages = [n for n, c in cli.COMMANDS.items() if not c.user]
    assert all(f"\n    {n} " in main for n in listed) and not any(f"\n    {n} " in main for n in stages)
    assert "run by the workflow" in main and all(n in main.split("run by the workflow")[1] for n in stages)
    assert "(default: config/config.yaml)" in sub.choices["plan"].format_help()  # defaults are shown
