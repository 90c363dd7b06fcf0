"""Runtime: run a deploy bundle or engine on the robot. Imports neither torch nor numba."""
