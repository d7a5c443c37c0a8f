// The shared suite on a 32-bit MicroPython: MicroPython's WebAssembly port (npm
// @micropython/micropython-webassembly-pyscript, pinned in the Makefile), under Node.js.
//
//   node tools/mp32.mjs [--port DIR] [--heap BYTES] [mprun.py's arguments ...]
//   node tools/mp32.mjs [--port DIR] [--heap BYTES] [--copy DIR ...] --run FILE [ARG ...]
//
// --port DIR   where the npm package is (default: .venv/npm/node_modules/<package>, which
//              `make venv` installs); $DDQ_MP32 does the same.
// --heap BYTES MicroPython's initial heap (default 8 MiB; the port grows it when full: it
//              collects garbage only between two calls from JavaScript, never inside one, as it
//              cannot scan the WebAssembly stack; its gc.mem_free() counts the 128 MiB it may
//              grow by).
// --copy DIR   copy the host directory DIR into the in-memory filesystem at the same path.
// --run FILE   run the host file FILE (copied in) instead of mprun, sys.argv [FILE, ARG, ...],
//              with MP32 in its globals: the heap before it was compiled. If it leaves a
//              generator STEPS, each of its steps is a call of its own (so garbage is collected
//              between steps, as a board's GC would before each step's gc.collect()). Exit
//              status 0, or 1 if it raised (tools/board_capacity.py's heap fill, model32).
//
// The port is 32-bit (sys.maxsize 2**31-1, small ints up to 2**30-1), with `os` and VfsPosix
// on Emscripten's in-memory filesystem and no NODEFS: the checkout's tests/ and port/ are copied
// into that filesystem under /repo, and tests/mprun.py's main runs there with the arguments
// given (mprun's "--fs posix" only: the port has neither VfsLfs2 nor VfsFat). Its output and its
// closing line "<label>: N passed, N failed, N skipped" are mprun's; the exit status is mprun's.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import url from "node:url";

const PKG = "@micropython/micropython-webassembly-pyscript";
const here = path.dirname(url.fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..");

function die(msg, code = 2) {
  process.stdout.write(`mp32: ${msg}\n`);
  process.exit(code);
}

const args = process.argv.slice(2);
let portDir = process.env.DDQ_MP32 || path.join(repo, ".venv", "npm", "node_modules", PKG);
let heap = 8 * 1024 * 1024;
const rest = [];
const copies = [];
let run = null;
for (let i = 0; i < args.length; i++) {
  const opt = ["--port", "--heap", "--copy", "--run"].includes(args[i]);
  if (run === null && opt && i + 1 < args.length) {
    const v = args[++i];
    if (args[i - 1] === "--port") portDir = path.resolve(v);
    else if (args[i - 1] === "--heap") heap = parseInt(v, 10);
    else if (args[i - 1] === "--copy") copies.push(path.resolve(v));
    else run = path.resolve(v);
  } else {
    rest.push(args[i]);
  }
}
if (!(heap > 0)) die("--heap needs a number of bytes");
const entry = path.join(portDir, "micropython.mjs");
if (!fs.existsSync(entry)) {
  die(`no ${entry}: run \`make venv\` (it installs ${PKG} with npm), or pass --port DIR`);
}

// Emscripten's file system reports WASI errno numbers (ENOENT 44, EEXIST 20) and the port passes
// them on, while MicroPython's errno module (like every board's VFS) has the Linux ones (ENOENT 2,
// EEXIST 17): OSError(44) where errno.ENOENT is 2. The file system's own code compares the WASI
// numbers, so they are mapped where a system call hands them to MicroPython: in a copy of the
// port's loader, made for this run in a temporary directory (the .wasm is read from the package).
const ERRNO = { 2: 13, 8: 9, 10: 16, 20: 17, 28: 22, 29: 5, 31: 21, 32: 40, 37: 36, 44: 2,
  51: 28, 54: 20, 55: 39, 63: 1, 75: 18 };
globalThis.__mp32Errno = (n) => (n in ERRNO ? ERRNO[n] : n);
const CATCH = '"ErrnoError"!==e.name)throw e;return';
let loader = fs.readFileSync(entry, "utf8");
const sites = loader.split(CATCH).length - 1;
loader = loader
  .replaceAll(CATCH + "-e.errno", CATCH + "-globalThis.__mp32Errno(e.errno)")
  .replaceAll(CATCH + " e.errno", CATCH + " globalThis.__mp32Errno(e.errno)");
if (sites < 10 || loader.split("__mp32Errno(e.errno)").length - 1 !== sites) {
  die(`${entry}: not the loader this script knows (${sites} system-call sites): pin 1.27.0`);
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "ddq-mp32-"));
let loadMicroPython;
try {
  const copy = path.join(tmp, "micropython.mjs");
  fs.writeFileSync(copy, loader);
  ({ loadMicroPython } = await import(url.pathToFileURL(copy).href));
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
const out = (s) => process.stdout.write(s + "\n");
const wasm = path.join(portDir, "micropython.wasm");
const mp = await loadMicroPython({ heapsize: heap, url: wasm, stdout: out, stderr: out });

// Copy a directory of the checkout into the in-memory filesystem (regular files only).
function copyIn(src, dst) {
  mp.FS.mkdirTree(dst);
  for (const ent of fs.readdirSync(src, { withFileTypes: true })) {
    if (ent.name === "__pycache__") continue;
    const s = path.join(src, ent.name);
    const d = dst + "/" + ent.name;
    if (ent.isDirectory()) copyIn(s, d);
    else if (ent.isFile()) mp.FS.writeFile(d, fs.readFileSync(s));
  }
}
if (run !== null) {
  // A script of the host's (paths as on the host: each --copy directory and the script's own).
  for (const d of copies) copyIn(d, d);
  mp.FS.mkdirTree(path.dirname(run));
  mp.FS.writeFile(run, fs.readFileSync(run));
  mp.FS.chdir(path.dirname(run));
  mp.globals.set("_argv", JSON.stringify([run, ...rest]));
  try {
    // The heap before the script is compiled (the compiler's garbage may grow it): MP32.
    mp.runPython("import gc\ngc.collect()\n_h = gc.mem_free() + gc.mem_alloc()\n");
    mp.runPython(
      "import sys, json\n" +
        "sys.argv[:] = json.loads(_argv)\n" +
        "_f = open(sys.argv[0])\n" +
        "_src = _f.read()\n" +
        "_f.close()\n" +
        "_c = compile(_src, sys.argv[0], 'exec')\n" +
        "del _src, _f\n" +
        "_g = {'__name__': '__main__', 'MP32': _h}\n" +
        "exec(_c, _g)\n" +
        "_G = _g.get('STEPS')\n" +
        "del _c\n",
    );
    // A script that leaves a generator STEPS runs it one step a call: this port collects
    // garbage only between calls (inside one it grows the heap instead), so each yield is where
    // the heap is measured as a board's would be after gc.collect().
    const step = "gc.collect()\n_s = _G is not None and next(_G, 0) is not 0\n";
    do mp.runPython(step);
    while (mp.globals.get("_s"));
  } catch (e) {
    out(`mp32: ${e && e.message ? e.message.trim() : e}`);
    process.exit(1);
  }
  process.exit(0);
}
copyIn(path.join(repo, "tests"), "/repo/tests");
copyIn(path.join(repo, "port"), "/repo/port");
mp.FS.chdir("/repo");

// mprun's main returns the exit status; a Python exception surfaces here as a JS error.
mp.globals.set("_argv", JSON.stringify(rest));
let rc;
try {
  mp.runPython(
    "import sys, json\n" +
      "sys.path.insert(0, '/repo/tests')\n" +
      "import mprun\n" +
      "try:\n" +
      "    _rc = mprun.main(json.loads(_argv))\n" +
      "except SystemExit as e:\n" +
      "    _rc = e.args[0] if e.args and isinstance(e.args[0], int) else 2\n",
  );
  rc = mp.globals.get("_rc");
} catch (e) {
  out(`mp32: the runner stopped: ${e && e.message ? e.message.trim() : e}`);
  rc = 1;
}
process.exit(typeof rc === "number" ? rc : 1);
