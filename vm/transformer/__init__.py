"""The standard transformer of Eq. (1): layers, their weights, the residual-stream map.

`layers` runs Eq. (1a)/(1b) in torch, `weights` holds hardcoded weights as plain arrays,
`layout` names the rows (fields) and columns (regions) of X, `threads` picks the CPU
threads of a run's passes. Knows nothing of any
instruction set. May import `vm.common` only.
"""
