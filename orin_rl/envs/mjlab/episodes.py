"""What an mjlab task logs at an episode's end, counted per episode: an evaluation's
termination rates and its tracking error.

At a step where worlds reset, mjlab logs ``Episode_Termination/<term>``, how many of those
worlds ended by that term (a count), and ``Metrics/<command>/<metric>``, the mean over those
worlds of each one's value. A training log averages these over the steps that logged them, as
rsl_rl does; over an evaluation that gives no figure about its episodes: a count averaged over
reset steps is no rate (64.0 when 64 worlds time out in one step, fell_over 0.967 beside
time_out 0.267), and a world that falls early falls again and weighs in at every fall.

``EpisodeLog`` reads the same per-world values for the first episode each world ends (since
``restart``): ``Episode_Termination/<term>`` is the fraction of those episodes that the term
ended (they sum to 1 when each episode ends by one term; a world that falls at its time limit
counts in both), ``Metrics/<command>/<metric>`` the mean over those episodes of the value mjlab
logs for each. mjlab's velocity command accumulates ``error_vel_xy`` as
``sum over the episode's steps of |v_cmd_xy - v_xy| / (max resampling time / step_dt)``: not a
mean in m/s but one that grows with the episode's length (a 20 s Go1 episode logs 2.5x its mean
per-step error, an early fall little).
"""

from __future__ import annotations

from typing import Any

import torch

TERMINATION = "Episode_Termination/"


class EpisodeLog:
    """Per-episode values of an mjlab env's episode-end logs, on the device until ``pop``."""

    def __init__(self, env: Any):
        self.env = env  # mjlab's ManagerBasedRlEnv
        self._ended = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        self._before: dict[str, torch.Tensor] = {}
        self._sums: dict[str, torch.Tensor] = {}
        self._episodes = torch.zeros((), dtype=torch.float64, device=env.device)

    def names(self) -> list[str]:
        """The log keys this counts per episode (the others stay per-step means)."""
        terms = self.env.termination_manager._term_dones
        return [TERMINATION + k for k in terms] + list(self._command_metrics())

    def _command_metrics(self) -> dict[str, torch.Tensor]:
        """(num_envs,) value of each command term's metric, under mjlab's log name."""
        terms = getattr(self.env.command_manager, "_terms", {})  # none: a null manager
        n = self.env.num_envs
        return {
            f"Metrics/{name}/{metric}": value.detach().reshape(n, -1).float().mean(dim=1)
            for name, term in terms.items()
            for metric, value in term.metrics.items()
        }

    def before_step(self) -> None:
        """Each world's command metrics as they stand: what mjlab logs for a world whose
        episode the next step ends (its reset logs them before the step's command update)."""
        self._before = {k: v.clone() for k, v in self._command_metrics().items()}

    def after_step(self, done: torch.Tensor) -> None:
        """Count the worlds whose first episode ``done`` (num_envs,) ends: which term ended it
        (the termination manager's flags of this step) and its metrics."""
        first = done & ~self._ended
        self._ended |= done
        self._episodes += first.sum()
        for key, flags in self.env.termination_manager._term_dones.items():
            self._add(TERMINATION + key, (flags & first).sum())
        for key, value in self._before.items():
            self._add(key, torch.where(first, value, 0.0).sum())

    def _add(self, key: str, value: torch.Tensor) -> None:
        value = value.to(torch.float64)
        if key in self._sums:
            self._sums[key] += value
        else:
            self._sums[key] = value

    def restart(self) -> None:
        """Forget what was counted; every world's next episode to end is its first."""
        self._ended.zero_()
        self._episodes.zero_()
        self._sums = {}

    def pop(self) -> dict[str, float]:
        """Rates and means over the episodes counted since the last call (none: empty)."""
        episodes = float(self._episodes.item())
        keys = list(self._sums)
        values = torch.stack([self._sums[k] for k in keys]).tolist() if keys else []
        self.restart()
        if episodes == 0:
            return {}
        return {k: v / episodes for k, v in zip(keys, values, strict=True)}
