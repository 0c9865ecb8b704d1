"""What the r1_zero grader (alignment/grader.py) and the evaluators call.

answers.py         answer extraction (`\\boxed`, GSM8K `#### N`) and normalization: pure string functions
course.py          the course grader's (drgrpo_grader, fast mode) rules, without its false positives: the default
symbolic.py        math-verify equivalence and the course's sympy check in a worker process killed at a deadline
magnitude.py       answers too big for exact algebra, found from their text and scored 0
parallel.py        ParallelGrader: a reward function over many responses in worker processes
worker_process.py  a JSON-lines child process with a deadline per answer (a fork server)
parsers.py         MMLU option-letter and GSM8K last-number parsers (CS336 A5 supplement)
"""
