"""Kissing-number discovery (PKU NLPDL HW3 §7): a language model writes programs, a sandboxed verifier judges.

verifier.py       exact kissing-configuration check and the handout's metrics
sandbox.py        untrusted Python in a limited child process; one global back as JSON
search.py         search code: integer shells, conflict graphs, local search, the code-based 582 seed
discovery.py      best-of-N / refine / evolve program search under one time budget
report.py         the handout's report.md in its four sections
llm_client.py     chat over any OpenAI-compatible endpoint, or a local model
openai_server.py  a small OpenAI-compatible server over the rollout engine
"""
