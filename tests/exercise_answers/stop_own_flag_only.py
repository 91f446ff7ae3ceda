"""A wrong answer for 18's exercise (see tests/test_exercise_stopping.py)."""
def stop_everywhere(stop_here):
    return stop_here
