"""Answers to the exercises, right and wrong, that tests/test_exercises.py feeds to the checks.

Each wrong answer is a mistake a learner makes; each right one is written
differently from the solution, so the checks must test behaviour, not text.
"""
