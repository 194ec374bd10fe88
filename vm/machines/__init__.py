"""Machines assembled from blocks: SUBLEQ (Lemma 4) and FLEQ (Theorem 2)."""
