//! [2/13]: every command line of README.md's shell blocks is run. A line that states its exit
//! status (`# exit N`) runs exactly as written, with `sh`, from the repository with a temporary
//! HOME; every other line runs through the substitution table below (the `rho` the tests built
//! for `rho`, free loopback ports for fixed ones, a local nats-server for `10.0.0.5`, temporary
//! directories for `~` and `/srv`, a deadline for commands that serve), or names the test that
//! runs it. A README line in neither, or a table entry no README line matches, fails the test:
//! nothing is skipped silently.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rho_tests::{NatsServer, free_port, install, plugin_lib, rho_bin, workspace_dir};

/// What a README command must do.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// End with this status.
    Exit(i32),
    /// Keep serving (checked after a while), then stop cleanly on SIGTERM or closed input.
    Serves,
}

/// How a README command line runs in this test.
enum Run {
    /// As written with these words replaced (`from`, `to`), expecting this.
    Substituted(&'static [(&'static str, &'static str)], Expect),
    /// Run by another test: its file and name.
    Elsewhere(&'static str),
}

/// The README's command lines that do not state an exit status, and how each runs. Keys are the
/// lines as written, without their comment.
fn table() -> BTreeMap<&'static str, Run> {
    use Expect::*;
    use Run::*;
    const RHO: (&str, &str) = ("rho ", "{rho} ");
    BTreeMap::from([
        (
            "cargo test --workspace",
            Elsewhere(".ci/run: it is the command that runs this test"),
        ),
        ("cargo xtask demo", Substituted(&[], Exit(0))),
        (
            "rho serve --http 127.0.0.1:8750 --plugins /path/to/plugins",
            Substituted(
                &[RHO, ("8750", "{port}"), ("/path/to/plugins", "{plugins}")],
                Serves,
            ),
        ),
        (
            "rho serve --http 0.0.0.0:8750 --token-file ~/.rho-token --plugins /path/to/plugins",
            Substituted(
                &[
                    RHO,
                    ("8750", "{port}"),
                    ("~", "{home}"),
                    ("/path/to/plugins", "{plugins}"),
                ],
                Serves,
            ),
        ),
        (
            "rho token add ci --scope tools:call --tokens-file ~/.rho-tokens.toml",
            Substituted(&[RHO, ("~", "{home}")], Exit(0)),
        ),
        (
            "rho token add alice --tokens-file ~/.rho-tokens.toml",
            Substituted(&[RHO, ("~", "{home}")], Exit(0)),
        ),
        (
            "rho serve --http 0.0.0.0:8750 --tokens-file ~/.rho-tokens.toml --plugins /path/to/plugins",
            Substituted(
                &[
                    RHO,
                    ("8750", "{port}"),
                    ("~", "{home}"),
                    ("/path/to/plugins", "{plugins}"),
                ],
                Serves,
            ),
        ),
        (
            "rho policy check policy.cedar",
            Elsewhere(
                "tests/tests/policy.rs: rho_policy_check_validates_a_file_and_shows_what_a_principal_may_do runs it on a good and a bad file",
            ),
        ),
        (
            "rho policy check policy.cedar --principal '{\"id\": \"alice\", \"auth\": \"oauth\", \"scopes\": [\"tools:write\"]}' --plugins /path/to/plugins",
            Elsewhere(
                "tests/tests/policy.rs: rho_policy_check_validates_a_file_and_shows_what_a_principal_may_do runs it with a principal and plugins",
            ),
        ),
        (
            "rho serve --http 0.0.0.0:8750 --tokens-file ~/.rho-tokens.toml --policy policy.cedar --plugins /path/to/plugins",
            Elsewhere(
                "tests/tests/policy.rs: rho_serve_shows_each_principal_its_tools_and_tells_only_the_sessions_a_policy_change_affects runs it with named tokens and a policy file",
            ),
        ),
        (
            "rho token remove alice --tokens-file ~/.rho-tokens.toml",
            Substituted(&[RHO, ("~", "{home}")], Exit(0)),
        ),
        (
            "rho serve --config rho.toml --http 0.0.0.0:8750 --plugins /path/to/plugins",
            Elsewhere(
                "tests/tests/principals.rs: the_readme_example_behind_a_real_issuer_serves_the_python_sdk_and_names_who_called runs it with the README's rho.toml, behind a real OpenID provider",
            ),
        ),
        (
            "rho serve --http 127.0.0.1:8750 --web --plugins /path/to/plugins",
            Substituted(
                &[RHO, ("8750", "{port}"), ("/path/to/plugins", "{plugins}")],
                Serves,
            ),
        ),
        ("rho watch --attach", Substituted(&[RHO], Serves)),
        (
            "rho call echo '{\"text\":\"hi\"}' --host",
            Substituted(&[RHO], Exit(0)),
        ),
        (
            "rho serve --nats nats://10.0.0.5:4222 --nats-host build-1 --plugins /path/to/plugins",
            Substituted(
                &[
                    RHO,
                    ("nats://10.0.0.5:4222", "{nats}"),
                    ("/path/to/plugins", "{plugins}"),
                ],
                Serves,
            ),
        ),
        (
            "rho watch --nats nats://10.0.0.5:4222 --host build-1",
            Substituted(&[RHO, ("nats://10.0.0.5:4222", "{nats}")], Serves),
        ),
        (
            "rho watch --nats nats://10.0.0.5:4222 --web 127.0.0.1:8751",
            Substituted(
                &[RHO, ("nats://10.0.0.5:4222", "{nats}"), ("8751", "{port}")],
                Serves,
            ),
        ),
        (
            "rho node --nats nats://10.0.0.5:4222 --plugins ~/rho-plugins --node gpu-1",
            Substituted(
                &[RHO, ("nats://10.0.0.5:4222", "{nats}"), ("~", "{home}")],
                Serves,
            ),
        ),
        (
            "npm install --prefix ~/mcp @modelcontextprotocol/server-filesystem@2026.8.31",
            Substituted(&[], Exit(0)),
        ),
        ("mkdir -p ~/notes", Substituted(&[], Exit(0))),
        (
            "rho serve --plugins ~/rho-plugins --mcp \"fs=$HOME/mcp/node_modules/.bin/mcp-server-filesystem $HOME/notes\" --grant-read ~/mcp --grant-read ~/notes",
            Substituted(&[RHO], Serves),
        ),
        (
            "rho plugin key new ~/.rho/publisher.key",
            Elsewhere(
                "tests/tests/distribution.rs: the_readme_commands_publish_install_update_verify_list_and_remove runs README's block as written",
            ),
        ),
        (
            "rho plugin publish target/release/libecho.so echo.wasm oci://registry.example/tools/echo:0.1.0 --key ~/.rho/publisher.key",
            Elsewhere(
                "tests/tests/distribution.rs: the_readme_commands_publish_install_update_verify_list_and_remove runs README's block as written",
            ),
        ),
        (
            "rho plugin install oci://registry.example/tools/echo:0.1.0 --dir ~/rho-plugins --trust-key ~/.rho/publisher.key.pub",
            Elsewhere(
                "tests/tests/distribution.rs: the_readme_commands_publish_install_update_verify_list_and_remove runs README's block as written",
            ),
        ),
        (
            "rho plugin update --dir ~/rho-plugins --trust-key ~/.rho/publisher.key.pub",
            Elsewhere(
                "tests/tests/distribution.rs: the_readme_commands_publish_install_update_verify_list_and_remove runs README's block as written",
            ),
        ),
        (
            "rho plugin verify --dir ~/rho-plugins",
            Elsewhere(
                "tests/tests/distribution.rs: the_readme_commands_publish_install_update_verify_list_and_remove runs README's block as written",
            ),
        ),
        (
            "rho plugin list --dir ~/rho-plugins",
            Elsewhere(
                "tests/tests/distribution.rs: the_readme_commands_publish_install_update_verify_list_and_remove runs README's block as written",
            ),
        ),
        (
            "rho plugin remove echo --dir ~/rho-plugins",
            Elsewhere(
                "tests/tests/distribution.rs: the_readme_commands_publish_install_update_verify_list_and_remove runs README's block as written",
            ),
        ),
        ("rho plugin new greet", Substituted(&[RHO], Exit(0))),
        (
            "rho plugin new greet --wasm",
            Elsewhere(
                "tests/tests/wasm.rs: rho_plugin_new_wasm_and_dev_build_install_and_reload_a_component",
            ),
        ),
        (
            "cd greet && cargo test",
            Elsewhere(
                "tests/tests/xtask.rs: rho_plugin_new_makes_a_crate_of_its_own_anywhere_that_builds_loads_and_answers runs it where no checkout can be seen",
            ),
        ),
        (
            "rho plugin dev --out ~/rho-plugins",
            Elsewhere(
                "tests/tests/xtask.rs: rho_plugin_new_makes_a_crate_of_its_own_anywhere_that_builds_loads_and_answers",
            ),
        ),
        (
            "rho watch --plugins ~/rho-plugins",
            Substituted(&[RHO, ("~", "{home}")], Serves),
        ),
        (
            "rho call greet '{\"name\":\"Ada\"}' --plugins ~/rho-plugins",
            Elsewhere(
                "tests/tests/xtask.rs: rho_plugin_new_makes_a_crate_of_its_own_anywhere_that_builds_loads_and_answers",
            ),
        ),
        (
            "rho plugin check target/debug/libgreet.so",
            Elsewhere(
                "tests/tests/xtask.rs: rho_plugin_new_makes_a_crate_of_its_own_anywhere_that_builds_loads_and_answers",
            ),
        ),
        (
            "cargo build --release",
            Elsewhere(
                "tests/tests/xtask.rs: rho_plugin_new_makes_a_crate_of_its_own_anywhere_that_builds_loads_and_answers (a debug build)",
            ),
        ),
        (
            "cp target/release/libgreet.so /srv/rho/plugins/.greet.tmp",
            Substituted(
                &[
                    ("target/release/libgreet.so", "{greet}"),
                    ("/srv/rho/plugins", "{srv}"),
                ],
                Exit(0),
            ),
        ),
        (
            "mv /srv/rho/plugins/.greet.tmp /srv/rho/plugins/libgreet.so",
            Substituted(&[("/srv/rho/plugins", "{srv}")], Exit(0)),
        ),
    ])
}

/// Every command line of the README's `sh` blocks, without its comment, with the exit status it
/// states (`# exit N`) if any.
fn readme_commands() -> Vec<(String, Option<i32>)> {
    let readme = std::fs::read_to_string(workspace_dir().join("README.md")).unwrap();
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
            continue;
        }
        if !in_sh || trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let status = trimmed
            .rsplit_once("# exit ")
            .and_then(|(_, n)| n.trim().parse().ok());
        let command = match trimmed.find("  #").or_else(|| trimmed.find(" # ")) {
            Some(at) => trimmed[..at].trim_end(),
            None => trimmed,
        };
        commands.push((command.to_owned(), status));
    }
    commands
}

/// Where this test runs commands: a temporary HOME (with `~/.rho-token` and `~/rho-plugins`),
/// the rest of the environment as cargo needs it.
struct Place {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
    srv: tempfile::TempDir,
    plugins: tempfile::TempDir,
    nats: NatsServer,
}

impl Place {
    fn new() -> Place {
        let home = tempfile::tempdir().unwrap();
        // As a user's home is: others may enter it (an MCP server run as `nobody` under a root
        // host reads what its grants name in it).
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let token = home.path().join(".rho-token");
        std::fs::write(&token, "a-token-of-the-readme-test\n").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mine = home.path().join("rho-plugins");
        std::fs::create_dir(&mine).unwrap();
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o700)).unwrap();
        install(&mine, "echo");
        let plugins = rho_tests::plugin_dir(&["echo", "picture", "files"]);
        Place {
            home,
            cwd: tempfile::tempdir().unwrap(),
            srv: tempfile::tempdir().unwrap(),
            plugins,
            nats: NatsServer::start(),
        }
    }

    /// `sh -c line` in `dir`, HOME the temporary one (cargo keeps its own home and toolchain).
    fn shell(&self, line: &str, dir: &Path) -> Command {
        let real_home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| real_home.join(".cargo"));
        let rustup_home = std::env::var_os("RUSTUP_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| real_home.join(".rustup"));
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(line)
            .current_dir(dir)
            .env("HOME", self.home.path())
            .env("CARGO_HOME", cargo_home)
            .env("RUSTUP_HOME", rustup_home)
            // npm's cache stays the user's own: a package the tests fetched is not fetched again.
            .env("npm_config_cache", real_home.join(".npm"))
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_RUNTIME_DIR");
        for (key, _) in std::env::vars_os() {
            if key
                .to_str()
                .is_some_and(rho_devkit::set_by_cargo_for_its_program)
            {
                command.env_remove(&key);
            }
        }
        command
    }

    /// `line` with the substitutions' placeholders filled in.
    fn substitute(&self, line: &str, subs: &[(&str, &str)]) -> String {
        let mut out = line.to_owned();
        for (from, to) in subs {
            let to = to
                .replace("{rho}", rho_bin().to_str().unwrap())
                .replace("{port}", &free_port().to_string())
                .replace("{plugins}", self.plugins.path().to_str().unwrap())
                .replace("{home}", self.home.path().to_str().unwrap())
                .replace("{nats}", &self.nats.url())
                .replace("{srv}", self.srv.path().to_str().unwrap())
                .replace("{greet}", plugin_lib("echo").to_str().unwrap());
            out = out.replace(from, &to);
        }
        out
    }
}

/// Runs `command` to its end within two minutes: its status and output.
fn finish(mut command: Command, what: &str) -> (Option<i32>, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("`{what}` did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Starts `command` as a server: its input open (a stdio server serves while it is).
fn start(mut command: Command) -> Child {
    use std::os::unix::process::CommandExt;
    // A process group of its own: the shell and what it started are stopped together.
    command
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Checks that `child` still serves after a while, then stops it as a user would (SIGTERM, its
/// input closed) and checks that it ends cleanly.
fn still_serves_then_stops(mut child: Child, what: &str) {
    std::thread::sleep(Duration::from_millis(1500));
    if let Some(status) = child.try_wait().unwrap() {
        let mut stderr = String::new();
        let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr);
        panic!("`{what}` ended ({status}) instead of serving: {stderr}");
    }
    // The whole group: the shell may not have handed its process over to the command (it ran
    // as a child of `sh`, which left it running, orphaned, after each run).
    let group = child.id() as i32;
    // SAFETY: signals our own child's process group.
    unsafe { libc::kill(-group, libc::SIGTERM) };
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "`{what}` did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // SIGTERM or a closed input end a server with status 0; a watcher may end by the signal.
    assert!(
        status.code() == Some(0) || status.code().is_none(),
        "`{what}`: {status}"
    );
    // Nothing of it is left.
    // SAFETY: signal 0 only asks whether the group still has a process.
    while unsafe { libc::kill(-group, 0) } == 0 {
        assert!(
            Instant::now() < deadline,
            "`{what}` left a process running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_readme_command_runs_as_documented() {
    let commands = readme_commands();
    let table = table();
    for (line, status) in &commands {
        assert!(
            status.is_some() || table.contains_key(line.as_str()),
            "README line `{line}` states no exit status and is not in the substitution table"
        );
    }
    for key in table.keys() {
        assert!(
            commands.iter().any(|(line, _)| line == key),
            "the table's `{key}` is no README line any more"
        );
    }
    // A line another test runs: that test exists (or, for the suite itself, CI runs it).
    for (line, run) in &table {
        let Run::Elsewhere(where_) = run else {
            continue;
        };
        let (file, rest) = where_.split_once(": ").unwrap();
        let text = std::fs::read_to_string(workspace_dir().join(file)).unwrap();
        let named = rest.split_whitespace().next().unwrap_or_default();
        assert!(
            text.contains(&format!("fn {named}(")) || text.contains(line),
            "`{line}` is said to be run by {where_}, which does not run it"
        );
        eprintln!("`{line}`: run by {where_}");
    }
    let place = Place::new();
    let workspace = workspace_dir();

    // What the README says to do before its commands.
    let (code, out) = finish(
        place.shell("cargo xtask build-plugins", workspace),
        "build-plugins",
    );
    assert_eq!(code, Some(0), "{out}");
    for round in ["first", "second"] {
        let (code, out) = finish(
            place.shell("cargo xtask demo", workspace),
            "cargo xtask demo",
        );
        assert_eq!(code, Some(0), "{out}");
        // The second run builds nothing again (a variable of cargo's own made ring and
        // everything above it build twice per run).
        if round == "second" {
            assert!(!out.contains("Compiling"), "a second demo compiled: {out}");
        }
    }

    // The lines that state their status, exactly as written, from the repository.
    let out_dir = workspace.join("out");
    for (line, status) in commands.iter().filter(|(_, s)| s.is_some()) {
        let (code, out) = finish(place.shell(line, workspace), line);
        assert_eq!(code, *status, "`{line}`: {out}");
    }
    assert!(
        out_dir.read_dir().unwrap().count() >= 1,
        "--save-images wrote nothing"
    );
    let _ = std::fs::remove_dir_all(&out_dir);

    // The others, through the table, in the README's order; a server keeps serving while the
    // lines that talk to it (`--attach`, `--host`) run.
    let mut running: Option<(Child, String)> = None;
    for (line, _) in commands.iter().filter(|(_, s)| s.is_none()) {
        let Some(Run::Substituted(subs, expect)) = table.get(line.as_str()) else {
            continue;
        };
        if line == "cargo xtask demo" {
            continue; // run above, twice
        }
        let command = place.substitute(line, subs);
        match expect {
            Expect::Exit(status) => {
                let dir = if line.starts_with("rho plugin new") {
                    place.cwd.path()
                } else {
                    workspace
                };
                let (code, out) = finish(place.shell(&command, dir), &command);
                assert_eq!(code, Some(*status), "`{command}`: {out}");
            }
            Expect::Serves if line.starts_with("rho serve --http 127.0.0.1") => {
                if let Some((child, what)) = running.take() {
                    still_serves_then_stops(child, &what);
                }
                running = Some((start(place.shell(&command, place.cwd.path())), command));
            }
            Expect::Serves => {
                let child = start(place.shell(&command, place.cwd.path()));
                still_serves_then_stops(child, &command);
            }
        }
    }
    if let Some((child, what)) = running.take() {
        still_serves_then_stops(child, &what);
    }
    assert!(
        place.srv.path().join("libgreet.so").is_file(),
        "cp and mv installed nothing"
    );
}
