"""RoPE attention and the gradient of its training loss (the RoPE-gradient paper).

`forward`: exact attention, in the standard rotary form and the paper's general form
(Definition 3.1, a matrix W_{i-j} per offset). `gradient`: the closed-form gradient of the
paper's loss (Lemma 5.3) with respect to its parameter X = X1 (x) X2, exact in O(n^2).
`polynomial`: the degree-g approximation of exp (Lemma 3.4) and the monomial feature map
that turns it into low-rank factors. `toeplitz`: Toeplitz products by FFT. `fast`: the
almost-linear approximation of Section 6, never forming an n x n matrix.

Self-contained numerics in float64 torch; may import `vm.common` only.
"""
