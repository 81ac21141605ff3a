"""Which library serves the C++ standard library to wanfw's binaries at run time.

The torch wheels export copies of parts of libstdc++ (std::filesystem, regex and string-stream
pieces of their toolchain's static support library). A binary that searches LibTorch before the
C++ runtime binds its std:: calls to those copies, which need not match the headers it was
compiled against (torch 2.11's std::filesystem::remove_all jumps to a null address: every run
that pruned a checkpoint crashed)."""
import os
import re
import subprocess
from pathlib import Path

from harness.runs import BUILD, WANFW

BINDING = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `([^']+)'")


def ours(path: str) -> bool:
    return path.startswith(str(BUILD)) or "/lib/libwanfw_" in path or path.endswith("bin/wanfw")


def test_std_library_symbols_of_wanfw_binaries_bind_to_the_cxx_runtime_not_libtorch():
    # `wanfw plugins` loads the core library and every built-in plugin.
    env = {**os.environ, "LD_DEBUG": "bindings"}
    result = subprocess.run([str(WANFW), "plugins"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    bindings = [(src, dst, sym) for src, dst, sym in BINDING.findall(result.stderr) if ours(src)]
    runtime = next(dst for _, dst, _ in bindings if Path(dst).name.startswith("libstdc++.so"))
    # What the C++ runtime itself defines (not template instantiations, which every library that
    # uses them carries a copy of and may share).
    listing = subprocess.run(["nm", "-D", "--defined-only", "--format=just-symbols", runtime],
                             capture_output=True, text=True, check=True).stdout.split()
    exported = {name.split("@")[0] for name in listing}  # newer binutils append @@VERSION
    runtime_symbols = [(src, dst, sym) for src, dst, sym in bindings if sym in exported]
    assert any("filesystem" in sym and dst == runtime for _, dst, sym in runtime_symbols), \
        "no std::filesystem call of ours was seen binding to the C++ runtime"
    # Inline functions our libraries instantiated themselves may bind to one of ours; never to a
    # copy in another project's library.
    elsewhere = [b for b in runtime_symbols if b[1] != runtime and not ours(b[1])]
    assert not elsewhere, f"C++ runtime symbols of wanfw bound to copies outside {runtime}:\n" + "\n".join(
        f"{src} -> {dst}: {sym}" for src, dst, sym in elsewhere[:20])
