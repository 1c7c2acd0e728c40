//! A cpu cgroup of its own for a process the bench starts, as the kubelet gives each container
//! one: in a cluster, ha-guard's threads compete for the CPU with each other, and its pod's cgroup
//! with the others; on this machine, without one, they compete thread by thread with etcd, the
//! kube-apiserver, the controllers and kwok. `serve`'s counts of new templates run at the lowest
//! priority (`SCHED_IDLE`), which yields to every normal thread of the same cgroup.
//!
//! Needs write access to the cgroup file system (root): cgroup v1's `cpu` hierarchy, or v2 with
//! the `cpu` controller enabled for the root's children. Where neither is at hand the bench says
//! so and runs the process where it is.

use std::path::{Path, PathBuf};

/// A cgroup holding one process; removed on drop (any process still in it goes back to the
/// parent first).
pub struct CpuCgroup {
    dir: PathBuf,
    parent: PathBuf,
}

impl CpuCgroup {
    /// Moves `pid` (all its threads) into a new cpu cgroup named `name` under the root, with the
    /// default weight (v1 `cpu.shares` 1024, v2 `cpu.weight` 100). The error says why not.
    pub fn enter(name: &str, pid: u32) -> Result<CpuCgroup, String> {
        let parent = root()?;
        let dir = parent.join(name);
        // Left by a run that was killed: empty, or emptied here.
        if dir.exists() {
            let _ = CpuCgroup { dir: dir.clone(), parent: parent.clone() }.remove();
        }
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cgroup = CpuCgroup { dir, parent };
        let procs = cgroup.dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string())
            .map_err(|e| format!("cannot move {pid} to {}: {e}", procs.display()))?;
        Ok(cgroup)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn remove(&self) -> std::io::Result<()> {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(self.parent.join("cgroup.procs"), pid);
        }
        std::fs::remove_dir(&self.dir)
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("[scale] cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// Where new cpu cgroups go: v1's `cpu` hierarchy, else the v2 root if it hands `cpu` to its
/// children.
fn root() -> Result<PathBuf, String> {
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.shares").exists() {
        return Ok(v1.to_path_buf());
    }
    let v2 = Path::new("/sys/fs/cgroup");
    match std::fs::read_to_string(v2.join("cgroup.subtree_control")) {
        Ok(c) if c.split_whitespace().any(|c| c == "cpu") => Ok(v2.to_path_buf()),
        Ok(_) => Err("cgroup v2 without the cpu controller enabled for the root's children".into()),
        Err(_) => Err("no cgroup file system with a cpu controller at /sys/fs/cgroup".into()),
    }
}
