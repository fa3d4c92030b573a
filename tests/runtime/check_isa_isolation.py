"""Checks that AVX-512 code in a Prism binary lives only in the AVX-512 tiers' kernels.

The tree is built for x86-64-v3 and runtime/cpu/kernels/ once more per tier; a kernel of a tier
the CPU lacks is never called. That only holds if no AVX-512 instruction leaks out of the
tier namespaces (prism::cpu::avx512::, prism::cpu::avx512_bf16::): for example an inline
std:: function instantiated inside an AVX-512 kernel file and merged by the linker with the
baseline's copy, which would then run on an AVX2-only CPU and die with SIGILL.

AVX-512 instructions are recognised by their encoding, not their names: in 64-bit mode every
EVEX-encoded instruction (all of AVX-512, whatever the register width) starts with 0x62,
possibly after an address-size or segment prefix. Usage: check_isa_isolation.py BINARY...
"""
import re
import subprocess
import sys

# A function of a tier's namespace, or one instantiated with a tier's types (a template's
# demangled name starts with its return type, and std:: templates carry the tier in their
# arguments): either is only ever called from that tier's code.
ALLOWED = re.compile(r"prism::cpu::avx512(_bf16)?::")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")
# "  4011d6:\t62 f1 7c 48 10 07    \tvmovups ..." (bytes, then the mnemonic)
INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")
PREFIXES = {"26", "2e", "36", "3e", "64", "65", "67"}


def evex(byte_text):
    for b in byte_text.split():
        if b in PREFIXES:
            continue
        return b == "62"
    return False


def leaks(binary):
    """(function, first AVX-512 instruction) for each function outside the tiers that has one."""
    proc = subprocess.Popen(["objdump", "-d", "-C", "-w", binary],
                            stdout=subprocess.PIPE, text=True, errors="replace")
    found = {}
    function = None
    for line in proc.stdout:
        m = FUNCTION.match(line)
        if m:
            function = m.group(1)
            continue
        if function is None or function in found or ALLOWED.search(function):
            continue
        i = INSTRUCTION.match(line)
        if i and evex(i.group(1)):
            found[function] = i.group(2).strip()
    if proc.wait() != 0:
        sys.exit(f"objdump failed on {binary}")
    return found


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bad = 0
    for binary in sys.argv[1:]:
        found = leaks(binary)
        for function, instruction in sorted(found.items()):
            print(f"{binary}: AVX-512 outside the tier kernels: {function}: {instruction}")
        bad += len(found)
        print(f"{binary}: {'no' if not found else len(found)} function(s) with AVX-512 code outside "
              "prism::cpu::avx512:: and prism::cpu::avx512_bf16::")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
