"""The transformer and the reference interpreter executing one program side by side.

The REPL needs both at the same step: one drives execution and is shown, the
other follows, so `diff` can compare them after every step. Every edit the
user makes between steps (a memory word, a typed instruction) goes to both.
The transformer is only ever changed by its own passes or by writing ±1 codes
into the punchcard X between passes, exactly the entries a pass would leave.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from assembler.fleq_program import FleqProgram
from assembler.program import Instruction, Program, word_range
from vm.machines.subleq.punchcard import encode
from vm.common.encoding import pm1_code
from vm.common.errors import InputError
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.common.geometry import Geometry
from vm.transformer.layout import Layout
from vm.machines.fleq.layout import FleqGeometry
from vm.machines.subleq.reference import ReferenceMachine
from vm.repl import ENGINES
from vm.repl.names import shown_int


@dataclass(frozen=True)
class EngineState:
    """What an engine holds between steps: memory words and the program counter."""

    memory: list[int]
    pc: int


def encode_state(program: Program, geometry: Geometry, layout: Layout, memory: list[int],
                 pc: int) -> np.ndarray:
    """The punchcard of `program` as it would be with `memory` and program counter `pc`."""
    X = encode(program, geometry, layout)
    write_word_codes(X, layout, geometry, range(len(memory)), memory)
    X[layout["pc"], layout.regions["scratch"].start] = pm1_code(
        geometry.instruction_column(pc), geometry.pos_bits)
    return X


def write_word_codes(X: np.ndarray | torch.Tensor, layout: Layout, geometry: Geometry,
                     addresses: range | list[int], values: list[int]) -> None:
    """Store `values` as ±1 words in the memory columns of `addresses` of X (rows, n)."""
    for address, value in zip(addresses, values):
        code = pm1_code(value, geometry.bits)
        column = geometry.memory_column(address)
        if isinstance(X, torch.Tensor):
            X[layout["mem"], column] = torch.as_tensor(code, dtype=X.dtype, device=X.device)
        else:
            X[layout["mem"], column] = code


class Lockstep:
    """One program on the transformer and on a reference interpreter, always at the same step.

    `active` names the engine that drives execution (its program counter
    decides breakpoints and EOF) and whose state is shown. Subclasses say how
    the reference machine is made, read and copied (SUBLEQ words, FLEQ cells).
    """

    def __init__(self, program: Program | FleqProgram, geometry: Geometry | FleqGeometry,
                 config: EngineConfig = EngineConfig(), active: str = "transformer") -> None:
        if active not in ENGINES:
            raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {active!r}")
        self.program, self.geometry, self.active = program, geometry, active
        self.executor = TransformerExecutor(geometry, config)
        self.layout = self.executor.layout
        self.reset()

    def _new_reference(self):
        raise NotImplementedError

    def _reference_memory(self) -> list:
        raise NotImplementedError

    def _reference_copy(self):
        """A reference machine to change and commit, leaving the current one intact."""
        raise NotImplementedError

    def reset(self) -> None:
        """Both engines back to the program's initial state, step 0."""
        self.X = self.executor.load([self.program])
        self.reference = self._new_reference()
        self.steps = 0
        self._decoded: tuple[torch.Tensor, EngineState] | None = None

    def state(self, engine: str | None = None) -> EngineState:
        """Memory and program counter of `engine` (default: the active one)."""
        if (engine or self.active) == "reference":
            return EngineState(self._reference_memory(), self.reference.pc)
        if self._decoded is None or self._decoded[0] is not self.X:
            memory, pc = self.executor.decode(self.X)[0]
            self._decoded = (self.X, EngineState(memory, pc))
        return self._decoded[1]

    @property
    def halted(self) -> bool:
        """Has the active engine reached the EOF instruction?"""
        return self.state().pc == self.program.eof

    def _memory_after_pass(self, patched: torch.Tensor) -> torch.Tensor:
        """X with its memory rows taken from one pass over `patched` (X with a typed
        instruction at pc); everything else, the program counter included, stays. The checked
        mode, when on, holds the pass to its own input, `patched`, not to the program's own
        instruction columns."""
        after = self.executor.step(patched, self.steps)
        memory, rows = self.layout.regions["memory"], self.layout["mem"]
        new_X = self.X.clone()
        new_X[0, rows, memory.start:memory.stop] = after[0, rows, memory.start:memory.stop]
        return new_X

    def step(self) -> str | None:
        """One instruction on both engines; what went wrong in it that the user must know
        (none here: FLEQ names a domain it left).

        Both new states are computed first and committed in one statement, so
        a Ctrl-C lands before or after a whole step, never between the engines.
        """
        new_X = self.executor.step(self.X, self.steps)
        reference = self._reference_copy()
        reference.step()
        self.X, self.reference, self.steps = new_X, reference, self.steps + 1
        return None


class LockstepMachine(Lockstep):
    """A SUBLEQ program on both engines.

    Switching engines resynchronizes: the engine switched to takes over the
    memory and program counter of the one left, so execution goes on from the
    state on screen and the two agree again.
    """

    def _new_reference(self) -> ReferenceMachine:
        return ReferenceMachine(self.program)

    def _reference_memory(self) -> list:
        return list(self.reference.memory)

    # -- state ----------------------------------------------------------------
    def differences(self) -> list[tuple[str, int, int]]:
        """(what, transformer value, reference value) for every memory cell and the pc
        on which the two engines disagree."""
        ours, theirs = self.state("transformer"), self.state("reference")
        found = [(self.program.address_name(address), mine, other)
                 for address, (mine, other) in enumerate(zip(ours.memory, theirs.memory))
                 if mine != other]
        if ours.pc != theirs.pc:
            found.append(("pc", ours.pc, theirs.pc))
        return found

    # -- execution -------------------------------------------------------------
    def execute(self, instruction: Instruction) -> None:
        """Run one instruction that is not in the program against the current state:
        memory changes, the program counter and the step count stay.

        The transformer runs it as one ordinary pass over X' = X with the
        instruction column at pc replaced by the typed pointers; only the
        memory words of the result are kept. The pass runs on an executor whose
        punchcard is X', so the checked mode, when on, checks it against X'
        rather than against the program's own instruction columns. The
        reference runs it as the only instruction of a program holding the
        current memory.
        """
        self._check_writable(instruction)
        pc_column = self.geometry.instruction_column(self._pc_inside_program())
        B, layout = self.geometry.pos_bits, self.layout
        patched = self.X.clone()
        pointers = {"instr_a": self.geometry.memory_column(instruction.a),
                    "instr_b": self.geometry.memory_column(instruction.b),
                    "instr_c": pc_column}
        for field, column in pointers.items():
            patched[0, layout[field], pc_column] = torch.as_tensor(
                pm1_code(column, B), dtype=patched.dtype, device=patched.device)
        new_X = self._memory_after_pass(patched)
        single = Program([Instruction(instruction.a, instruction.b, 0)],
                         list(self.reference.memory), bits=self.program.bits,
                         source=self.program.source, eof_operands=self.program.eof_operands)
        alone = ReferenceMachine(single)
        alone.step()
        reference = self._reference_copy()
        reference.memory = alone.memory
        self.X, self.reference = new_X, reference

    def _reference_copy(self) -> ReferenceMachine:
        reference = copy.copy(self.reference)
        reference.memory = list(self.reference.memory)
        return reference

    def _pc_inside_program(self) -> int:
        """The instruction the transformer's pc points at, clamped into the program so the
        patched pass always fetches from a real instruction column."""
        return min(max(self.state("transformer").pc, 0), self.program.eof)

    def _check_writable(self, instruction: Instruction) -> None:
        cells = len(self.program.memory)
        if not (0 <= instruction.a < cells and 0 <= instruction.b < cells):
            raise InputError(f"operand outside memory (cells 0..{cells - 1})")
        if instruction.b in self.program.eof_operands and instruction.a != instruction.b:
            raise InputError(f"cannot write reserved cell {instruction.b} "
                             "(the EOF instruction needs it unchanged)")

    def set_word(self, address: int, value: int) -> None:
        """Store `value` at `address` on both engines (between passes)."""
        low, high = word_range(self.program.bits)
        if not low <= value <= high:
            raise InputError(f"value {shown_int(value)} does not fit in "
                             f"{self.program.bits}-bit words (range {low}..{high})")
        if not 0 <= address < len(self.program.memory):
            raise InputError(f"address {shown_int(address)} outside memory "
                             f"(cells 0..{len(self.program.memory) - 1})")
        if address in self.program.eof_operands:
            raise InputError(f"cell {address} is reserved (the EOF instruction needs it "
                             "unchanged)")
        new_X = self.X.clone()
        write_word_codes(new_X[0], self.layout, self.geometry, [address], [value])
        reference = self._reference_copy()
        reference.memory[address] = value
        self.X, self.reference = new_X, reference

    def switch(self, engine: str) -> bool:
        """Make `engine` active, resynchronized from the one left; True if they differed."""
        if engine not in ENGINES:
            raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if engine == self.active:
            return False
        differed = bool(self.differences())
        source = self.state()
        if differed and not 0 <= source.pc <= self.program.eof:
            raise InputError(f"cannot resynchronize: the {self.active}'s pc {source.pc} is "
                             "outside the program (use reset)")
        if differed and engine == "transformer":
            X = encode_state(self.program, self.geometry, self.layout, source.memory,
                             source.pc)
            self.X = self.executor.load_punchcards(X)
        elif differed:
            reference = self._reference_copy()
            reference.memory, reference.pc = list(source.memory), source.pc
            self.reference = reference
        self.active = engine
        return differed
