//! The interoperability scripts (`tests/interop/*.py`: files and lakes as other writers write
//! them, readers of the outputs) run under the test command's Python.

use std::path::Path;
use std::process::Command;

/// Runs `tests/interop/<script>` with `args` under the interoperability Python
/// (`$OURIOS_INTEROP_PYTHON`, which `tests/run.sh` exports; else `python3`), which must
/// succeed; its stdout. The panic names the modules it `needs` when it fails.
pub fn interop_script(script: &str, args: &[&str], needs: &str) -> String {
    let python = std::env::var("OURIOS_INTEROP_PYTHON").unwrap_or_else(|_| "python3".into());
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/interop")
        .join(script);
    let out = Command::new(&python)
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        out.status.success(),
        "{script} {args:?} failed (it needs {needs}: bash tests/run.sh installs them into .tools/venv):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
