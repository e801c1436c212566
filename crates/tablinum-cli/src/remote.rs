//! Which cluster a command talks to and as whom: `--cluster`,
//! `TABLINUM_CLUSTER`, the CLI config file, the token and the CA.
//!
//! Precedence, first found wins: the flag, the environment variable, the
//! config file (`$TABLINUM_CONFIG`, else `config.toml` beside the
//! credentials file: `$XDG_CONFIG_HOME/tablinum/`, else
//! `$HOME/.config/tablinum/`), the built-in default (the embedded cluster
//! of `tablinum up`). Owns resolving these and opening a client; it never
//! prints and never writes the config file.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use tablinum_auth::files::{credentials_path, load_token_file, lookup_credentials, TOKEN_ENV};
use tablinum_client::{Client, ClientConfig, Credential, CLUSTER_ADDR_DEFAULT};

/// Environment variable naming the default cluster address.
pub const CLUSTER_ENV: &str = "TABLINUM_CLUSTER";
/// Environment variable naming the CLI config file.
pub const CONFIG_ENV: &str = "TABLINUM_CONFIG";
/// Largest config file read, bytes.
const CONFIG_BYTES_MAX: u64 = 64 * 1024;

/// Where the cluster is and who is asking.
#[derive(Debug, Clone, Args)]
pub struct ClusterArg {
    /// The manager's gRPC address (default: $TABLINUM_CLUSTER, then the CLI
    /// config file's `cluster`, then the embedded cluster of `tablinum up`,
    /// 127.0.0.1:7400).
    #[arg(long, global = true, env = CLUSTER_ENV)]
    pub cluster: Option<String>,
    /// The token to present (default: $TABLINUM_TOKEN, then --token-file,
    /// then this address's entry in the credentials file that `tablinum up`
    /// writes).
    #[arg(long, global = true, env = TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the token (e.g. the manager's admin.token).
    #[arg(long, global = true, conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// Speak TLS, trusting the servers' certificates signed by this CA
    /// (PEM); default: $TABLINUM_CA, then the config file's `ca`, else
    /// plaintext.
    #[arg(long, global = true, env = "TABLINUM_CA")]
    pub ca: Option<PathBuf>,
}

/// The CLI config file: defaults for the cluster commands.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliConfig {
    /// Default cluster address.
    pub cluster: Option<String>,
    /// Default CA file (PEM) for TLS.
    pub ca: Option<PathBuf>,
    /// Default token file.
    pub token_file: Option<PathBuf>,
}

/// The config file's path: `$TABLINUM_CONFIG`, else `config.toml` beside
/// the credentials file.
pub fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    credentials_path().map(|p| p.with_file_name("config.toml"))
}

impl CliConfig {
    /// Reads the config file; a missing file is an empty config (unless
    /// `$TABLINUM_CONFIG` names it), a bad one an error naming the file and
    /// what was wrong.
    pub fn load() -> anyhow::Result<CliConfig> {
        let Some(path) = config_path() else {
            return Ok(CliConfig::default());
        };
        let explicit = std::env::var_os(CONFIG_ENV).is_some_and(|v| !v.is_empty());
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                return Ok(CliConfig::default())
            }
            Err(e) => return Err(e).with_context(|| format!("CLI config file {}", path.display())),
            Ok(m) if m.len() > CONFIG_BYTES_MAX => {
                crate::exit::usage!(
                    "CLI config file {} is {} bytes; at most {CONFIG_BYTES_MAX} are read",
                    path.display(),
                    m.len()
                )
            }
            Ok(_) => {}
        }
        Self::parse_file(&path)
    }

    fn parse_file(path: &Path) -> anyhow::Result<CliConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading CLI config file {}", path.display()))?;
        match toml::from_str(&text) {
            Ok(c) => Ok(c),
            Err(e) => crate::exit::usage!("CLI config file {}: {e}", path.display()),
        }
    }
}

/// A [`ClusterArg`] with every default applied.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The cluster's address.
    pub cluster: String,
    token: Option<String>,
    token_file: Option<PathBuf>,
    ca: Option<PathBuf>,
}

impl Resolved {
    /// No cluster: for commands that never connect (checking a file).
    pub fn offline() -> Resolved {
        Resolved {
            cluster: String::new(),
            token: None,
            token_file: None,
            ca: None,
        }
    }
}

impl ClusterArg {
    /// Applies the config file and the built-in defaults.
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        let need_file = self.cluster.is_none() || self.ca.is_none() || self.token_file.is_none();
        let file = if need_file {
            CliConfig::load()?
        } else {
            CliConfig::default()
        };
        Ok(Resolved {
            cluster: self
                .cluster
                .clone()
                .or(file.cluster)
                .unwrap_or_else(|| CLUSTER_ADDR_DEFAULT.to_string()),
            token: self.token.clone(),
            token_file: self.token_file.clone().or(if self.token.is_none() {
                file.token_file
            } else {
                None
            }),
            ca: self.ca.clone().or(file.ca),
        })
    }
}

impl Resolved {
    /// The credential to present: `--token` / `TABLINUM_TOKEN`, else
    /// `--token-file` (or the config file's), else the credentials file's
    /// entry for the address.
    pub fn credential(&self) -> anyhow::Result<Option<Credential>> {
        if let Some(t) = &self.token {
            return match Credential::parse(t) {
                Ok(c) => Ok(Some(c)),
                Err(e) => crate::exit::usage!("--token (or TABLINUM_TOKEN): {e}"),
            };
        }
        if let Some(f) = &self.token_file {
            return Ok(Some(load_token_file(f)?));
        }
        match credentials_path() {
            Some(p) => Ok(lookup_credentials(&p, &self.cluster)?),
            None => Ok(None),
        }
    }

    /// Opens a client (with a dispatcher file's profiles, if given).
    pub fn connect(
        &self,
        dispatcher: Option<std::sync::Arc<tablinum_client::Profiles>>,
    ) -> anyhow::Result<Client> {
        let tls = match &self.ca {
            Some(ca) => Some(tablinum_client::ClientTls::from_files(ca, None)?),
            None => None,
        };
        let cfg = ClientConfig {
            tls,
            dispatcher,
            ..ClientConfig::with_credential(self.credential()?)
        };
        Ok(Client::connect_with(&self.cluster, cfg)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_with_an_unknown_key_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "cluster = \"h:1\"\nclustr = \"x\"\n").unwrap();
        let e = format!("{:#}", CliConfig::parse_file(&p).unwrap_err());
        assert!(e.contains("clustr") && e.contains("c.toml"), "{e}");
        std::fs::write(&p, "cluster = \"h:1\"\nca = \"/ca.pem\"\n").unwrap();
        let c = CliConfig::parse_file(&p).unwrap();
        assert_eq!(c.cluster.as_deref(), Some("h:1"));
        assert_eq!(c.ca, Some(PathBuf::from("/ca.pem")));
    }
}
