"""FLEQ sources shared by several test modules."""

GROW = """.data
a: 1e15
n: 40
one: 1
.code
loop: a = {op}(a, a)
      n = sub(n, one)
      if n <= 0 goto done
      goto loop
done: halt
"""
"""Squares (mul) or doubles (add) a from 1e15 forty times: the first step leaves the
machine's domain (|x| <= 2^50) with mul, and add follows within a few steps."""
