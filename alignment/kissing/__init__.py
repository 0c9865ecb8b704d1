"""Kissing-number discovery (PKU NLPDL HW3 §7): a language model writes programs, a sandboxed verifier judges.

verifier.py       exact kissing-configuration check, the course evaluator's entries, verdicts and metrics
sandbox.py        untrusted Python in a limited child process; a global or a function's result back as JSON
search.py         search code: integer shells, conflict graphs, local search, the code-based 582 seed
environment.py    the refinement loop as an environment (alignment.envs.base): the model's program, the verdict,
                  the handout's refinement prompts; GRPO trains on it with --env kissing
discovery.py      the handout's approaches as conversations with the refinement environment (environment.py)
report.py         the handout's report.md in its four sections
llm_client.py     chat over any OpenAI-compatible endpoint (extra fields, reasoning apart), or a local model
openai_server.py  a small OpenAI-compatible server over the rollout engine
"""
