//! Files holding secrets: the cluster secret, a bootstrap admin token, and
//! the user's credentials file (one token per cluster address).
//!
//! Every such file is written with mode 0600, to a temporary name first,
//! fsynced and renamed, so a reader sees the old file or the new one and
//! nobody else can read either. Reading treats the text as hostile: sizes
//! are bounded and malformed lines are named by number.
//! Never puts a secret in an error message.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::token::{ClusterSecret, Credential};
use crate::Error;

/// Largest secret or credentials file read, bytes.
pub const SECRET_FILE_BYTES_MAX: u64 = 64 << 10;
/// Environment variable naming a token for the CLI.
pub const TOKEN_ENV: &str = "TABLINUM_TOKEN";

/// Writes `text` to `path` with mode 0600, atomically (temporary file,
/// fsync, rename, fsync of the directory). Creates the parent directory
/// (mode 0700) if it is missing.
pub fn write_secret_file(path: &Path, text: &str) -> Result<(), Error> {
    let io = |what: &str, e: std::io::Error| Error::Io(format!("{what} {}: {e}", path.display()));
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io("cannot create the directory of", e))?;
    }
    let name = path
        .file_name()
        .ok_or_else(|| Error::Io(format!("{} names no file", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io("cannot write", e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io("cannot write", e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| io("cannot replace", e))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The text of a secret file, bounded in size.
pub fn read_secret_file(path: &Path) -> Result<String, Error> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::Io(format!("cannot read {}: {e}", path.display())))?;
    if meta.len() > SECRET_FILE_BYTES_MAX {
        return Err(Error::Malformed(format!(
            "{} is {} bytes; a secret file is at most {SECRET_FILE_BYTES_MAX}",
            path.display(),
            meta.len()
        )));
    }
    std::fs::read_to_string(path)
        .map_err(|e| Error::Io(format!("cannot read {}: {e}", path.display())))
}

/// The cluster secret in `path`, created (random, mode 0600) if the file
/// does not exist.
pub fn load_or_create_cluster_secret(path: &Path) -> Result<ClusterSecret, Error> {
    if path.exists() {
        return load_cluster_secret(path);
    }
    let s = ClusterSecret::generate()?;
    write_secret_file(path, &s.file_text())?;
    Ok(s)
}

/// The cluster secret in `path`.
pub fn load_cluster_secret(path: &Path) -> Result<ClusterSecret, Error> {
    ClusterSecret::parse(&read_secret_file(path)?)
        .map_err(|e| Error::Malformed(format!("{}: {e}", path.display())))
}

/// The token in a token file (`admin_token_file`, `--token-file`).
pub fn load_token_file(path: &Path) -> Result<Credential, Error> {
    Credential::parse(&read_secret_file(path)?)
        .map_err(|e| Error::Malformed(format!("{}: {e}", path.display())))
}

/// The user's credentials file: `$XDG_CONFIG_HOME/tablinum/credentials`,
/// else `$HOME/.config/tablinum/credentials`.
pub fn credentials_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })?;
    Some(base.join("tablinum").join("credentials"))
}

/// A cluster address as the credentials file keys it: no scheme, no
/// trailing slash.
pub fn address_key(addr: &str) -> String {
    let a = addr
        .strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr);
    a.trim_end_matches('/').to_string()
}

const CREDENTIALS_HEADER: &str =
    "# tablinum credentials: one line per cluster, `<address> <token>` (mode 0600)\n";

/// Parses a credentials file: `(address, token)` per line; `#` comments
/// and blank lines are skipped. A malformed line is an error naming it.
fn parse_credentials(path: &Path, text: &str) -> Result<Vec<(String, Credential)>, Error> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let bad =
            |why: String| Error::Malformed(format!("{} line {}: {why}", path.display(), i + 1));
        let mut parts = l.split_whitespace();
        let (Some(addr), Some(tok), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("expected `<address> <token>`".into()));
        };
        let c = Credential::parse(tok).map_err(|e| bad(e.to_string()))?;
        out.push((address_key(addr), c));
    }
    Ok(out)
}

/// The token stored for `addr` in the credentials file at `path`, if the
/// file exists and names that address.
pub fn lookup_credentials(path: &Path, addr: &str) -> Result<Option<Credential>, Error> {
    if !path.exists() {
        return Ok(None);
    }
    let key = address_key(addr);
    Ok(parse_credentials(path, &read_secret_file(path)?)?
        .into_iter()
        .find(|(a, _)| *a == key)
        .map(|(_, c)| c))
}

/// Stores `token` for `addr` in the credentials file at `path`, replacing
/// any token stored for that address and keeping the others.
pub fn store_credentials(path: &Path, addr: &str, token: &Credential) -> Result<(), Error> {
    let key = address_key(addr);
    let mut entries = if path.exists() {
        parse_credentials(path, &read_secret_file(path)?)?
    } else {
        Vec::new()
    };
    entries.retain(|(a, _)| *a != key);
    entries.push((key, token.clone()));
    let mut text = String::from(CREDENTIALS_HEADER);
    for (a, c) in &entries {
        text.push_str(a);
        text.push(' ');
        text.push_str(c.expose());
        text.push('\n');
    }
    write_secret_file(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::NewToken;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secret_files_are_private_and_atomic() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub").join("cluster.secret");
        let s = load_or_create_cluster_secret(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = load_or_create_cluster_secret(&p).unwrap();
        assert_eq!(again.credential(), s.credential());
        std::fs::write(&p, "not a secret").unwrap();
        let e = load_cluster_secret(&p).unwrap_err().to_string();
        assert!(e.contains("cluster.secret") && e.contains("64"), "{e}");
        std::fs::write(&p, vec![b'a'; 100_000]).unwrap();
        assert!(load_cluster_secret(&p)
            .unwrap_err()
            .to_string()
            .contains("at most"));
    }

    #[test]
    fn credentials_file_keeps_one_token_per_address() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tablinum").join("credentials");
        assert_eq!(lookup_credentials(&p, "127.0.0.1:7400").unwrap(), None);
        let a = NewToken::generate().unwrap().token;
        let b = NewToken::generate().unwrap().token;
        let c = NewToken::generate().unwrap().token;
        store_credentials(&p, "127.0.0.1:7400", &a).unwrap();
        store_credentials(&p, "http://10.1.1.1:7400/", &b).unwrap();
        store_credentials(&p, "127.0.0.1:7400", &c).unwrap();
        assert_eq!(
            lookup_credentials(&p, "http://127.0.0.1:7400").unwrap(),
            Some(c)
        );
        assert_eq!(lookup_credentials(&p, "10.1.1.1:7400").unwrap(), Some(b));
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&p, "# c\n127.0.0.1:1 tbt1.zz\n").unwrap();
        let e = lookup_credentials(&p, "x").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
