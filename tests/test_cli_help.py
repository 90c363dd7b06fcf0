"""``--help`` shows every option's default; ``train --print-config`` documents each field."""

from __future__ import annotations

import argparse
import re

import pytest
import yaml

from orin_rl import cli
from orin_rl import config as C
from tests.test_cli import _parsers


def _takes_a_value(action: argparse.Action) -> bool:
    return bool(action.option_strings) and action.nargs != 0 and not action.required


def _shown_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text ``--help`` prints for ``action`` (the formatter's additions included)."""
    return " ".join(parser._get_formatter()._expand_help(action).split())


class TestDefaultsInHelp:
    def test_every_option_that_takes_a_value_says_its_default(self):
        """A walk over every command: an option that takes a value shows its default, or says
        the environment's preset decides; never a bare "None"."""
        missing = []
        for name, parser in _parsers(cli.build_parser()):
            for action in parser._actions:
                if not _takes_a_value(action) or action.default == []:  # --set: repeatable
                    continue
                shown = _shown_help(parser, action)
                if not re.search(r"default|preset", shown) or "None" in shown:
                    missing.append(f"{name} {action.option_strings[0]}: {shown!r}")
        assert not missing, "no default in --help: " + "; ".join(missing)

    @pytest.mark.parametrize(
        ("command", "flag", "shown"),
        [
            ("run", "--rate", "(default: 100"),
            ("run", "--steps", "(default: 1000)"),
            ("run", "--device", "(default: cpu)"),
            ("eval", "--seed", "(default: 0)"),
            ("eval", "--device", "(default: cpu)"),
            ("bench", "--batch", "(default: 1,128)"),
            ("bench", "--threads", "(default: 1)"),
            ("bench", "--out", "(default: bench/infer)"),
            ("export", "--batch", "(default: dynamic)"),
            ("train", "--num-envs", "preset"),
            ("train", "--total-steps", "preset"),
        ],
    )
    def test_the_reported_flags(self, command, flag, shown):
        parser = dict(_parsers(cli.build_parser()))[f"orin-rl {command}"]
        action = next(a for a in parser._actions if flag in a.option_strings)
        assert shown in _shown_help(parser, action)

    def test_bench_help_prints_where_it_writes(self, capsys):
        with pytest.raises(SystemExit):
            cli.main(["bench", "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "PREFIX.json, PREFIX.md and PREFIX.png (default: bench/infer)" in out

    def test_train_preset_defaults_name_the_dataclass_fallback(self):
        """Where no preset sets a flag, config.py's default applies: help names both."""
        parser = dict(_parsers(cli.build_parser()))["orin-rl train"]
        num_envs = next(a for a in parser._actions if "--num-envs" in a.option_strings)
        assert str(C.Config().env.num_envs) in _shown_help(parser, num_envs)


class TestPrintConfigWithDocs:
    def test_each_field_has_its_description_as_a_comment(self):
        """The ``#`` lines right above each section and field are its docstring, whole."""
        comments: dict[str, str] = {}
        above: list[str] = []
        section = ""
        for line in C.to_yaml(C.Config()).splitlines():
            if line.lstrip().startswith("# "):
                above.append(line.lstrip()[2:])
            elif match := re.match(r"( *)(\w+):", line):
                indent, name = match.groups()
                section = name if not indent else section
                comments[f"{section}.{name}" if indent else name] = " ".join(above)
                above = []
        cfg = C.Config()
        for section in C.SECTIONS:
            assert comments[section] == C.field_docs(C.Config)[section]
            for name, doc in C.field_docs(type(getattr(cfg, section))).items():
                assert comments[f"{section}.{name}"] == " ".join(doc.split()), (section, name)

    @pytest.mark.parametrize(
        "argv",
        [
            ["--env", "CartPole-v1"],
            ["--env", "Pendulum-v1", "--algo", "sac"],
            ["--env", "Hopper-v5", "--set", "env.wrappers=[a:b]", "--set", "ppo.target_kl=0.02"],
        ],
    )
    def test_the_commented_yaml_loads_back_equal(self, tmp_path, argv):
        cfg = cli.train_config(cli.build_parser().parse_args(["train", *argv]))
        path = tmp_path / "printed.yaml"
        path.write_text(C.to_yaml(cfg))
        assert yaml.safe_load(path.read_text()) == C.to_dict(cfg)
        assert C.load(path) == cfg
        again = cli.train_config(
            cli.build_parser().parse_args(["train", "--no-preset", "--config", str(path)])
        )
        assert again == cfg

    def test_print_config_prints_the_documented_yaml(self, capsys, tmp_path):
        assert cli.main(["train", "--env", "CartPole-v1", "--print-config"]) == 0
        out = capsys.readouterr().out
        assert "# Number of parallel environments stepped as one batch." in out
        path = tmp_path / "printed.yaml"
        path.write_text(out)
        cfg = cli.train_config(cli.build_parser().parse_args(["train", "--env", "CartPole-v1"]))
        assert C.load(path) == cfg
