//! What a failure text means in terms of the sandbox: a note naming the capability denied.

use std::path::PathBuf;

use rho_protocol::Grants;

/// A note naming the capability the sandbox denies, for a failure text that shows the OS
/// refused something: `[sandbox: no network is granted to this plugin]`.
pub(crate) fn denial_note(text: &str, grants: &Grants) -> Option<String> {
    let has = |codes: &[&str]| codes.iter().any(|c| text.contains(c));
    if !grants.network
        && has(&[
            "os error 101)",
            "os error 97)",
            "Network is unreachable",
            "Address family not supported",
        ])
    {
        return Some("[sandbox: no network is granted to this plugin]".into());
    }
    if has(&["os error 13)", "os error 30)", "Permission denied"]) {
        let list = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut writes = String::from("/tmp (its scratch directory)");
        if !grants.write.is_empty() {
            writes.push_str(", ");
            writes.push_str(&list(&grants.write));
        }
        let extra_reads = if grants.read.is_empty() {
            String::new()
        } else {
            format!(" and {}", list(&grants.read))
        };
        return Some(format!(
            "[sandbox: this plugin may write only under {writes}, read system paths{extra_reads}]"
        ));
    }
    if has(&["os error 1)", "Operation not permitted"]) {
        let processes = if grants.processes {
            ""
        } else {
            "start processes (not granted), "
        };
        return Some(format!(
            "[sandbox: plugins may not {processes}signal or trace processes outside the \
             sandbox, mount or make namespaces]"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::ThreadCounter;

    #[test]
    fn notes_name_the_denied_capability() {
        let g = Grants::default();
        assert_eq!(
            denial_note("denied: Network is unreachable (os error 101)", &g).as_deref(),
            Some("[sandbox: no network is granted to this plugin]")
        );
        assert!(
            denial_note("Permission denied (os error 13)", &g)
                .is_some_and(|n| n.contains("/tmp (its scratch directory)"))
        );
        assert!(
            denial_note("Operation not permitted (os error 1)", &g)
                .is_some_and(|n| n.contains("start processes (not granted)"))
        );
        assert_eq!(denial_note("no such tool", &g), None);
    }

    /// The counter reads what `/proc/self/status` says, with a thread of this test running and
    /// after it ended (other tests' threads come and go meanwhile: a reading may be retried).
    #[test]
    fn the_thread_counter_counts_this_process_threads() {
        let status = || {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .unwrap()
                .trim()
                .parse::<usize>()
                .unwrap()
        };
        let counter = ThreadCounter::open().unwrap();
        let agrees = || (0..100).any(|_| counter.count() == Some(status()));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || stopped.recv());
        assert!(agrees(), "with a thread running");
        stop.send(()).unwrap();
        thread.join().unwrap().unwrap();
        assert!(agrees(), "after it ended");
    }
}
