"""The one engine behind the three front doors (the window, the command line, the local server).

A model thread owns the one model in memory and runs jobs on it in order (:mod:`core.engine.model_thread`);
every chat answer, whoever asks for it, is one :class:`~core.engine.answer_job.AnswerJob`: the decoding
plan, the conversation's n-gram pool, the answer itself, its label, and what Auto learned from it.
:func:`~core.engine.jobs.run_steps` drives any job with one throttle, one error path, one cancel rule.
"""
