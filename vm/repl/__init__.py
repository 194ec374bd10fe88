"""The interactive debugger (`ltvm repl`): session commands, lockstep state, names,
typed instructions, the terminal front end.

Sits on top: may import anything below it (assembler, runtime, tools, `vm.isa`).
"""
