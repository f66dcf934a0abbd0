"""What the lessons show and run besides the engine: widgets, figures, the
recorded real-GPU figures, the offline data sets and a small training loop.

Nothing below :mod:`helpers.teaching` imports from it.
"""
