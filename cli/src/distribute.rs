//! `rho plugin publish | install | update | verify | list | remove | key new`: signed plugin
//! distribution through OCI registries (rho-distribution), for the command line.

use std::path::{Path, PathBuf};

use rho_distribution::{
    Access, Credentials, Declaration, DistributionError, InstallPolicy, Installed, Platform,
    PlatformFile, PluginRef, SigningKey, TrustedKeys, Update, Verified,
};
use rho_runtime::{Grants, Isolation, PluginLock};

/// Where registry credentials come from.
#[derive(clap::Args, Debug, Clone)]
pub struct RegistryFlags {
    /// A file holding a bearer token for the registry (default: the docker config file's
    /// credentials for it, else none).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Speak plain HTTP to the registry: refused unless it is on a loopback address (where
    /// plain HTTP is the default).
    #[arg(long)]
    pub plain_http: bool,
}

impl RegistryFlags {
    fn access(&self) -> Access {
        Access {
            credentials: match &self.token_file {
                Some(file) => Credentials::TokenFile(file.clone()),
                None => Credentials::DockerConfig,
            },
            plain_http: self.plain_http,
        }
    }
}

/// What an install trusts and accepts.
#[derive(clap::Args, Debug, Clone)]
pub struct TrustFlags {
    /// The configuration: its `[trust]` keys, and the grants of the `[[plugins]]` entry for
    /// `--dir` (without an entry: the default grants).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Trust this minisign public key file too (repeatable).
    #[arg(long, value_name = "PUBKEY_FILE")]
    pub trust_key: Vec<PathBuf>,
    /// Install although no trusted key signed the artifact.
    #[arg(long)]
    pub allow_unsigned: bool,
    /// Install although the plugin declares more than the directory grants.
    #[arg(long)]
    pub accept_capabilities: bool,
}

/// The install policy for `dir`: the configuration's keys and the flags', its grants.
fn policy(
    trust: &TrustFlags,
    registry: &RegistryFlags,
    dir: &Path,
) -> Result<InstallPolicy, String> {
    let config = match &trust.config {
        Some(path) => crate::config::load(path)?,
        None => crate::config::Config::default(),
    };
    let mut trusted: TrustedKeys = config.trust.trusted_keys().map_err(|e| e.to_string())?;
    for file in &trust.trust_key {
        trusted.add_file(file).map_err(|e| e.to_string())?;
    }
    Ok(InstallPolicy {
        trusted,
        allow_unsigned: trust.allow_unsigned || config.trust.allow_unsigned,
        grants: grants_of(&config, dir),
        accept_capabilities: trust.accept_capabilities,
        access: registry.access(),
    })
}

/// What `dir`'s plugins are granted: its `[[plugins]]` entry's grants (else `[workers]`'s);
/// `None` when the entry runs them in process. A directory without an entry gets the default
/// grants, as `rho serve --plugins DIR` would give it.
fn grants_of(config: &crate::config::Config, dir: &Path) -> Option<Grants> {
    let same = |a: &Path| match (a.canonicalize(), dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == dir,
    };
    let workers = &config.host.workers;
    match config.host.plugins.iter().find(|p| same(&p.dir)) {
        // The directory's options as a host builds them.
        Some(source) => match source.dir_options(workers).isolation {
            Isolation::Process(workers) => Some(workers.grants),
            Isolation::InProcess => None,
        },
        None => Some(workers.grants.clone()),
    }
}

/// Runs `work` on a runtime of its own (the plugin commands have none).
fn block_on<T>(work: impl std::future::Future<Output = T>) -> Result<T, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    Ok(runtime.block_on(work))
}

/// `rho plugin publish FILE... REFERENCE --key KEY`.
pub fn publish(
    files: &[PathBuf],
    reference: &str,
    key: &Path,
    registry: &RegistryFlags,
) -> Result<bool, String> {
    let at = PluginRef::parse(reference).map_err(|e| e.to_string())?;
    let key = SigningKey::from_file(key).map_err(|e| e.to_string())?;
    let files: Vec<PlatformFile> = files
        .iter()
        .map(|f| PlatformFile::read(f))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let declaration = declaration_of(&files)?;
    // A tag that reads as a version names the one published (`:latest`, `:stable` name none).
    if let Some(tag) = at.tag()
        && tag.starts_with(|c: char| c.is_ascii_digit())
        && tag.trim_start_matches('v') != declaration.version
    {
        eprintln!(
            "rho: note: the tag {tag} is not the version the plugin declares ({} {}); publishing \
             under it all the same",
            declaration.name, declaration.version
        );
    }
    let published = block_on(rho_distribution::publish(
        &files,
        &declaration,
        &at,
        &key,
        &registry.access(),
    ))?
    .map_err(|e| e.to_string())?;
    let platforms: Vec<String> = published.platforms.iter().map(|p| p.to_string()).collect();
    println!(
        "published {} {} ({}) to {} as {}",
        declaration.name,
        declaration.version,
        platforms.join(", "),
        at,
        published.digest
    );
    println!(
        "signed by key {} (signature {})",
        key.id(),
        published.signature
    );
    println!("pinned: {}", published.pinned);
    Ok(true)
}

/// The declaration of the files this host can load (a native library of this platform, a
/// component): loaded as `rho plugin check` does; all of them must agree.
fn declaration_of(files: &[PlatformFile]) -> Result<Declaration, String> {
    let mut declaration: Option<Declaration> = None;
    for file in files {
        let checked = if Some(file.platform) == Platform::native() {
            rho_devkit::check::inspect(&file.path)
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?
        } else if file.platform == Platform::Wasm {
            crate::inspect::component(&file.path)?
        } else {
            continue;
        };
        if let Some(refused) = checked.rejected.first() {
            return Err(format!(
                "{}: a tool the host refuses: {refused}",
                file.path.display()
            ));
        }
        let this = Declaration {
            name: checked.info.name,
            version: checked.info.version,
            interface_version: checked.info.interface_version,
            capabilities: checked.info.capabilities,
            tools: checked.tools,
        };
        match &declaration {
            None => declaration = Some(this),
            Some(first) if first.name != this.name || first.version != this.version => {
                return Err(format!(
                    "{}: plugin {} {}, but the other file is {} {}",
                    file.path.display(),
                    this.name,
                    this.version,
                    first.name,
                    first.version
                ));
            }
            Some(_) => {}
        }
    }
    declaration.ok_or_else(|| {
        format!(
            "no file this host can load to read the declaration from (a {} library or a wasm component)",
            Platform::native().map_or("native".into(), |p| p.to_string())
        )
    })
}

/// Prints what `verified` is and declares.
fn show(verified: &Verified) {
    let declaration = &verified.declaration;
    let signer = match &verified.signer {
        Some(key) => format!("signed by trusted key {key}"),
        None => "UNSIGNED: no trusted signature, taken on request (--allow-unsigned)".into(),
    };
    println!(
        "{} is {} {} ({}), {signer}",
        verified.pinned, declaration.name, declaration.version, verified.digest
    );
    println!("asks for: {}", declaration.capabilities);
    let tools: Vec<&str> = declaration.tools.iter().map(|t| t.name.as_str()).collect();
    println!("tools:    {}", tools.join(", "));
}

/// Prints where `installed` went.
fn show_installed(installed: &Installed, verified: &Verified, dir: &Path) {
    let entry = &installed.entry;
    for old in &installed.replaced {
        println!("replaced {} {} ({})", old.name, old.version, old.file);
    }
    println!(
        "installed {} (lock {})",
        dir.join(&entry.file).display(),
        PluginLock::path_for(dir).display()
    );
    if let (None, Some(key)) = (&verified.signer, &entry.signer) {
        println!(
            "  recorded as signed by key {key}: the same bytes that key's signature was verified \
             for when they were installed before"
        );
    }
}

/// `rho plugin install REFERENCE --dir DIR`.
pub fn install(
    reference: &str,
    dir: &Path,
    trust: &TrustFlags,
    registry: &RegistryFlags,
) -> Result<bool, String> {
    let at = PluginRef::parse(reference).map_err(|e| e.to_string())?;
    let policy = policy(trust, registry, dir)?;
    block_on(async {
        let verified = rho_distribution::fetch(&at, &policy).await?;
        show(&verified);
        if policy.grants.is_none() {
            println!("(this directory runs its plugins in process: nothing is confined)");
        }
        let installed = rho_distribution::install_verified(&verified, dir, &policy).await?;
        show_installed(&installed, &verified, dir);
        Ok::<_, DistributionError>(true)
    })?
    .map_err(|e| e.to_string())
}

/// `rho plugin update [NAME] --dir DIR`.
pub fn update(
    only: Option<&str>,
    dir: &Path,
    trust: &TrustFlags,
    registry: &RegistryFlags,
) -> Result<bool, String> {
    let policy = policy(trust, registry, dir)?;
    let updates =
        block_on(rho_distribution::update(dir, only, &policy))?.map_err(|e| e.to_string())?;
    for update in updates {
        match update {
            Update::Current(p) => println!("{} {}: up to date ({})", p.name, p.version, p.digest),
            Update::Pinned(p) => println!(
                "{} {}: installed by digest, nothing to follow",
                p.name, p.version
            ),
            Update::Updated { from, to } => println!(
                "{}: {} -> {} ({}, signed by {})",
                to.name,
                from.version,
                to.version,
                to.digest,
                to.signer.as_deref().unwrap_or("nobody")
            ),
        }
    }
    Ok(true)
}

/// `rho plugin verify --dir DIR`: `false` when any file differs from the lock.
pub fn verify(dir: &Path) -> Result<bool, String> {
    let findings = rho_distribution::verify(dir).map_err(|e| e.to_string())?;
    for finding in &findings {
        eprintln!("{finding}");
    }
    if findings.is_empty() {
        let lock = PluginLock::read(dir).map_err(|e| e.to_string())?;
        println!(
            "{} installed plugin(s) match {}",
            lock.plugins.len(),
            PluginLock::path_for(dir).display()
        );
    }
    Ok(findings.is_empty())
}

/// `rho plugin list --dir DIR`.
pub fn list(dir: &Path, json: bool) -> Result<bool, String> {
    let lock = PluginLock::read(dir).map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&lock.plugins).map_err(|e| e.to_string())?
        );
        return Ok(true);
    }
    for p in &lock.plugins {
        println!(
            "{} {}  {}  {}  signer {}  from {}",
            p.name,
            p.version,
            p.file,
            p.digest,
            p.signer.as_deref().unwrap_or("none (unsigned)"),
            p.source
        );
    }
    Ok(true)
}

/// `rho plugin remove NAME --dir DIR`.
pub fn remove(what: &str, dir: &Path) -> Result<bool, String> {
    let entry = rho_distribution::remove(dir, what).map_err(|e| e.to_string())?;
    println!(
        "removed {} {} ({})",
        entry.name,
        entry.version,
        dir.join(&entry.file).display()
    );
    Ok(true)
}

/// `rho plugin key new PATH`.
pub fn key_new(path: &Path) -> Result<bool, String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let (key, public) = SigningKey::generate(path).map_err(|e| e.to_string())?;
    println!(
        "secret key {} (no password: keep it secret)",
        path.display()
    );
    println!("public key {} (key id {})", public.display(), key.id());
    Ok(true)
}
