"""Chunked attention: attention over N tokens computed only by calls to a small transformer.

After Yu and Alman, "Two Heads Are Better than One: Simulating Large Transformers with Small
Ones": an oracle that accepts at most M tokens (`oracle`) answers small problems (`parts`,
several per call by `packing`), and light bookkeeping combines their answers (`merge`). The
variants plan the problems: `exact` (Lemma 3.1, Theorem 3.4), `causal` (Theorem 3.5),
`window` (Theorem 5.1, sliding window and attention sinks) and `sampled` (Theorem 4.1);
`simulate` runs a multi-layer, multi-head model with one of them. See
docs/chunked_attention.md.
"""

MODES = ("exact", "causal", "window", "sink", "sampled")
"""The variants `simulate` runs, by name; here, torch-free, so that the command line can list
them without importing torch."""
