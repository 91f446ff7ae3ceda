"""What the exercises' checks run in every rank around a learner's code.

A probe loads the learner's file in each rank, calls the learner's
function the way the lesson would, measures what happened and reports it
(one ``TypedDict`` per probe says what the report holds). One module per
topic, beside its checks in :mod:`ddp_lesson.exercises.checks`.
"""
