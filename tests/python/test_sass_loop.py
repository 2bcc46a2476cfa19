"""scripts/sass-loop on a hand-written SASS listing: the main loop is the widest backward branch,
its shortest path skips what a branch jumps over, spills in the loop are counted."""
from conftest import load_script

sass_loop = load_script("scripts/sass-loop")


def listing(body):
    lines = [f"        /*{addr:04x}*/                   {text} ;   /* 0x000 */"
             for addr, text in body]
    return "\n\tcode for sm_90a\n\t\tFunction : _Z6kernelv\n" + "\n".join(lines) + "\n"


# 0x00 setup; loop 0x10..0x90: a uniform branch over a slow region (0x40..0x60), an inner loop
# (0x70 back to 0x60), a spill reload, the back branch.
BODY = [
    (0x00, "MOV R1, c[0x0][0x28]"),
    (0x10, "HMMA.16816.F32.BF16 R4, R8, R12, R4"),
    (0x20, "LDL R2, [R1+0x8]"),
    (0x30, "@P0 BRA 0x70"),
    (0x40, "FMUL R5, R5, R6"),
    (0x50, "FMUL R6, R6, R6"),
    (0x60, "FADD R7, R7, R7"),
    (0x70, "@P1 BRA 0x60"),
    (0x80, "MUFU.EX2 R3, R3"),
    (0x90, "@P2 BRA 0x10"),
    (0xa0, "EXIT"),
]


def test_finds_the_main_loop_and_its_fast_path():
    ins = sass_loop.functions(listing(BODY))["_Z6kernelv"]
    assert len(ins) == len(BODY)
    lo, hi = sass_loop.main_loop(ins)
    assert (ins[lo][0], ins[hi][0]) == (0x10, 0x90)
    path = [ins[k][0] for k in sass_loop.shortest_path(ins, lo, hi)]
    # The taken branch at 0x30 skips the slow region; the inner loop's back branch falls through.
    assert path == [0x10, 0x20, 0x30, 0x70, 0x80, 0x90]


def test_report_counts_spills_and_the_path():
    ins = sass_loop.functions(listing(BODY))["_Z6kernelv"]
    text = sass_loop.report("_Z6kernelv", ins)
    assert "9 instructions, 1 LDL/STL; shortest path 6" in text
    assert "HMMA.16816.F32.BF16 1" in text and "BRA 3" in text
    assert sass_loop.report("k", [(0, "EXIT")]) == "k: no loop"


def test_collective_stubs_are_not_loops():
    """ptxas puts a warp-collective operation's fallback after the function's body and jumps
    back from it; that backward branch spans more than the loop and must not be taken for it."""
    body = BODY + [
        (0xb0, "WARPSYNC.COLLECTIVE R9, 0xe0"),
        (0xc0, "SHFL.BFLY PT, R3, R3, 0x1, 0x1f"),
        (0xd0, "ENDCOLLECTIVE"),
        (0xe0, "BRA 0x0"),
    ]
    ins = sass_loop.functions(listing(body))["_Z6kernelv"]
    lo, hi = sass_loop.main_loop(ins)
    assert (ins[lo][0], ins[hi][0]) == (0x10, 0x90)
    assert sass_loop.closes_collective_stub(ins, len(ins) - 1)
    assert not sass_loop.closes_collective_stub(ins, hi)


def test_ldmatrix_distances_follow_every_register_of_a_load():
    """An x4 ldmatrix writes four registers: an mma reading the upper pair of a B fragment is fed
    by that load too. Loads of another trip and plain writes in between do not count."""
    body = [
        (0x00, "LDSM.16.M88.4 R8, [R2]"),  # A: R8..R11
        (0x10, "LDSM.16.M88.4 R12, [R3]"),  # B of two n8 tiles: R12..R15
        (0x20, "HMMA.16816.F32.BF16 R20, R8, R12, R20"),  # 1 after the B load
        (0x30, "FMUL R5, R5, R5"),
        (0x40, "HMMA.16816.F32.BF16 R24, R8, R14, R24"),  # the upper pair: 3 after it
        (0x50, "MOV R12, R5"),  # R12 and R13 no longer ldmatrix results
        (0x60, "MOV R13, R5"),
        (0x70, "HMMA.16816.F32.BF16 R28, R4, R12, R28"),  # fed by no load
        (0x80, "HMMA.16816.F32.BF16 R28, R4, R16, R28"),  # nor this one
        (0x90, "EXIT"),
    ]
    ins = sass_loop.functions(listing(body))["_Z6kernelv"]
    assert sass_loop.ldmatrix_distances(ins, list(range(len(ins)))) == [1, 3]


def test_copy_waits_find_the_first_write_to_a_copy_address():
    """A run of cp.async copies reads 64-bit address pairs; the first later instruction writing
    either half of one waits for the copy that last read it. Stores, filler and short runs do
    not count; a 64-bit write covers two registers."""
    body = [
        (0x00, "LDGSTS.E.BYPASS.128 [R9+0x0], desc[UR4][R20.64]"),
        (0x10, "LDGSTS.E.BYPASS.128 [R9+0x800], desc[UR4][R22.64], !P0"),
        (0x20, "@!PT LDS RZ, [RZ]"),
        (0x30, "LDGSTS.E.BYPASS.128 [R9+0x1000], desc[UR4][R20.64+0x80]"),
        (0x40, "LDGSTS.E.BYPASS.128 [R9+0x1800], desc[UR4][R22.64+0x80]"),
        (0x50, "STS [R20], R3"),  # reads R20: no wait
        (0x60, "FMUL R5, R5, R6"),
        (0x70, "IMAD.WIDE.U32 R22, R4, R6, R8"),  # writes R22, R23: read last by copy 4
        (0x80, "LDGSTS.E.BYPASS.128 [R9], desc[UR4][R30.64]"),  # a run of 1
        (0x90, "MOV R30, R5"),
        (0xa0, "@P0 BRA 0x0"),
        (0xb0, "EXIT"),
    ]
    ins = sass_loop.functions(listing(body))["_Z6kernelv"]
    lo, hi = sass_loop.main_loop(ins)
    assert sass_loop.copy_waits(ins, lo, hi) == [(0, 4, 2, 4)]
    assert sass_loop.copy_waits(ins, lo, hi, min_run=1)[1] == (8, 1, 0, 1)
    text = sass_loop.report("_Z6kernelv", ins, show_copies=True)
    assert "4 copies at 0x0: overwritten 2 instructions after it, last read by copy 4" in text


def test_loop_ends_are_the_fixed_code_around_the_loop():
    """Entry to the loop's head: a taken branch skips the slow setup, the early EXIT falls
    through. Loop to exit: the nearer of two EXITs, past a skippable store."""
    body = [
        (0x00, "MOV R1, c[0x0][0x28]"),
        (0x10, "@!P0 EXIT"),
        (0x20, "@P1 BRA 0x50"),
        (0x30, "IMAD R2, R2, R3, R4"),  # setup a taken branch skips
        (0x40, "IMAD R2, R2, R3, R4"),
        (0x50, "CS2R R4, SRZ"),
        (0x60, "HMMA.16816.F32.BF16 R4, R8, R12, R4"),  # the loop: 0x60..0x70
        (0x70, "@P2 BRA 0x60"),
        (0x80, "FMUL R4, R4, R5"),
        (0x90, "@P3 BRA 0xb0"),
        (0xa0, "STG.E.128 [R6.64], R4"),
        (0xb0, "EXIT"),
        (0xc0, "STG.E.128 [R6.64], R4"),  # reached by no path
        (0xd0, "EXIT"),
    ]
    ins = sass_loop.functions(listing(body))["_Z6kernelv"]
    lo, hi = sass_loop.main_loop(ins)
    assert (ins[lo][0], ins[hi][0]) == (0x60, 0x70)
    prologue, epilogue = sass_loop.loop_ends(ins, lo, hi)
    assert [ins[k][0] for k in prologue] == [0x00, 0x10, 0x20, 0x50]
    assert [ins[k][0] for k in epilogue] == [0x80, 0x90, 0xb0]
    text = sass_loop.report("_Z6kernelv", ins, show_ends=True)
    assert "entry -> loop: 4 instructions" in text and "loop -> exit: 3 instructions" in text
    # A loop at the function's end has no exit path after it.
    tail = [(0x00, "MOV R1, R2"), (0x10, "FADD R1, R1, R1"), (0x20, "@P0 BRA 0x10")]
    ins = sass_loop.functions(listing(tail))["_Z6kernelv"]
    lo, hi = sass_loop.main_loop(ins)
    assert sass_loop.loop_ends(ins, lo, hi) == ([0], None)
    assert "loop -> exit: no path" in sass_loop.report("_Z6kernelv", ins, show_ends=True)
