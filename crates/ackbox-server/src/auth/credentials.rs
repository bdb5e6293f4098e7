//! The credentials file: access keys, their secrets, and what each may do.
//!
//! ```toml
//! [[keys]]
//! access_key_id = "AKIDEXAMPLE"
//! secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
//! allow_queues = ["orders-*", "payments.fifo"]
//! allow_topics = ["order-events"]
//! allow_actions = ["SendMessage", "ReceiveMessage", "DeleteMessage", "Publish"]
//! ```
//!
//! Queue and topic patterns are globs over queue and topic names (`*` any
//! run of characters, `?` one character; `*` alone allows every one). Action
//! patterns are globs over IAM-style permission names, case-insensitive as in
//! IAM, with an optional `sqs:` or `sns:` prefix; as in IAM, a batch action needs the permission of
//! its single form (`SendMessageBatch` needs `SendMessage`). Every mistake
//! is refused when the file is loaded, naming the key and the entry, so a
//! typo never silently denies (or allows) anything.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::operation::Action;

/// The shortest secret accepted: a secret must not be guessable.
pub const MIN_SECRET_CHARS: usize = 16;
/// The longest access key id (AWS's limit).
pub const MAX_ACCESS_KEY_ID_CHARS: usize = 128;

/// Why a credentials file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// The file could not be read.
    #[error("cannot read the credentials file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML of the expected shape.
    #[error("the credentials file {path} is not valid: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The TOML error, with its line.
        #[source]
        source: toml::de::Error,
    },
    /// The file holds no key, so nothing could ever be allowed.
    #[error("the credentials file {path} defines no [[keys]]")]
    NoKeys {
        /// The file.
        path: PathBuf,
    },
    /// An access key id is empty, too long or has characters AWS ids cannot.
    #[error(
        "access_key_id {id:?} must be 1 to {MAX_ACCESS_KEY_ID_CHARS} letters, digits or '_' (as AWS key ids are)"
    )]
    BadKeyId {
        /// The id as written.
        id: String,
    },
    /// Two entries share an access key id.
    #[error("access_key_id {id:?} is defined twice")]
    DuplicateKey {
        /// The id.
        id: String,
    },
    /// A secret too short to resist guessing.
    #[error(
        "secret_access_key of {id:?} must be at least {MIN_SECRET_CHARS} characters; it has {chars}"
    )]
    ShortSecret {
        /// The key.
        id: String,
        /// Its secret's length.
        chars: usize,
    },
    /// A queue or topic pattern with characters no name can have.
    #[error(
        "{list} entry {pattern:?} of {id:?} can match nothing: queue and topic names are letters, digits, '-', '_' and '.fifo', patterns add '*' and '?'"
    )]
    BadQueuePattern {
        /// The key.
        id: String,
        /// `allow_queues` or `allow_topics`.
        list: &'static str,
        /// The pattern.
        pattern: String,
    },
    /// An action pattern that matches no action (a typo).
    #[error("allow_actions entry {pattern:?} of {id:?} matches no action; actions are {known}")]
    UnknownAction {
        /// The key.
        id: String,
        /// The pattern.
        pattern: String,
        /// Every permission name, comma-separated.
        known: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    #[serde(default)]
    keys: Vec<KeyEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    access_key_id: String,
    secret_access_key: String,
    #[serde(default)]
    allow_queues: Vec<String>,
    #[serde(default)]
    allow_topics: Vec<String>,
    #[serde(default)]
    allow_actions: Vec<String>,
}

/// A glob of `*` (any run) and `?` (any one character).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glob(Vec<char>);

impl Glob {
    fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        let pattern = &self.0;
        // Iterative wildcard matching with one backtrack point: linear in
        // practice, and never exponential, whatever the pattern.
        let (mut p, mut t) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while t < text.len() {
            if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
                p += 1;
                t += 1;
            } else if p < pattern.len() && pattern[p] == '*' {
                star = Some((p, t));
                p += 1;
            } else if let Some((star_p, star_t)) = star {
                p = star_p + 1;
                t = star_t + 1;
                star = Some((star_p, star_t + 1));
            } else {
                return false;
            }
        }
        pattern[p..].iter().all(|&c| c == '*')
    }
}

/// One access key and what it may do.
pub struct AccessKey {
    /// The public half, as clients send it.
    pub access_key_id: String,
    secret_access_key: String,
    queues: Vec<Glob>,
    topics: Vec<Glob>,
    actions: Vec<Glob>,
}

impl std::fmt::Debug for AccessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessKey")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"..")
            .field("queues", &self.queues)
            .field("topics", &self.topics)
            .field("actions", &self.actions)
            .finish()
    }
}

impl AccessKey {
    /// The secret that signs this key's requests.
    pub fn secret(&self) -> &str {
        &self.secret_access_key
    }

    /// Whether the key may use the queue `name`.
    pub fn may_use_queue(&self, name: &str) -> bool {
        self.queues.iter().any(|glob| glob.matches(name))
    }

    /// Whether the key may use the topic `name`.
    pub fn may_use_topic(&self, name: &str) -> bool {
        self.topics.iter().any(|glob| glob.matches(name))
    }

    /// Whether the key holds `permission` (an IAM-style name such as `SendMessage`).
    pub fn may_perform(&self, permission: &str) -> bool {
        let permission = permission.to_ascii_lowercase();
        self.actions.iter().any(|glob| glob.matches(&permission))
    }
}

/// Every access key of a credentials file, by id.
#[derive(Debug, Default)]
pub struct Credentials {
    keys: HashMap<String, Arc<AccessKey>>,
}

impl Credentials {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, CredentialsError> {
        let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
            path: path.to_owned(),
            source,
        })?;
        #[cfg(unix)]
        if let Ok(metadata) = std::fs::metadata(path) {
            use std::os::unix::fs::PermissionsExt;
            if metadata.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    path = %path.display(),
                    "the credentials file is readable by other users; chmod 600 it"
                );
            }
        }
        Self::parse(&text, path)
    }

    /// Checks credentials given as TOML text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, CredentialsError> {
        let file: CredentialsFile =
            toml::from_str(text).map_err(|source| CredentialsError::Parse {
                path: path.to_owned(),
                source,
            })?;
        if file.keys.is_empty() {
            return Err(CredentialsError::NoKeys {
                path: path.to_owned(),
            });
        }
        let mut keys = HashMap::new();
        for entry in file.keys {
            let key = AccessKey::try_from(entry)?;
            if keys.contains_key(&key.access_key_id) {
                return Err(CredentialsError::DuplicateKey {
                    id: key.access_key_id,
                });
            }
            keys.insert(key.access_key_id.clone(), Arc::new(key));
        }
        Ok(Self { keys })
    }

    /// The key with this id.
    pub fn get(&self, access_key_id: &str) -> Option<Arc<AccessKey>> {
        self.keys.get(access_key_id).cloned()
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none (never, for a loaded file).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl TryFrom<KeyEntry> for AccessKey {
    type Error = CredentialsError;

    fn try_from(entry: KeyEntry) -> Result<Self, Self::Error> {
        let id = entry.access_key_id;
        if id.is_empty()
            || id.len() > MAX_ACCESS_KEY_ID_CHARS
            || !id
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        {
            return Err(CredentialsError::BadKeyId { id });
        }
        let chars = entry.secret_access_key.chars().count();
        if chars < MIN_SECRET_CHARS {
            return Err(CredentialsError::ShortSecret { id, chars });
        }
        let queues = name_globs(&id, "allow_queues", entry.allow_queues)?;
        let topics = name_globs(&id, "allow_topics", entry.allow_topics)?;
        let mut actions = Vec::new();
        for pattern in entry.allow_actions {
            let lowered = pattern.to_ascii_lowercase();
            let bare = lowered
                .strip_prefix("sqs:")
                .or_else(|| lowered.strip_prefix("sns:"))
                .unwrap_or(&lowered);
            let glob = Glob(bare.chars().collect());
            let permissions = Action::permissions();
            if !permissions
                .iter()
                .any(|permission| glob.matches(&permission.to_ascii_lowercase()))
            {
                return Err(CredentialsError::UnknownAction {
                    id,
                    pattern,
                    known: permissions.join(", "),
                });
            }
            actions.push(glob);
        }
        Ok(Self {
            access_key_id: id,
            secret_access_key: entry.secret_access_key,
            queues,
            topics,
            actions,
        })
    }
}

/// The globs of an `allow_queues` or `allow_topics` list.
fn name_globs(
    id: &str,
    list: &'static str,
    patterns: Vec<String>,
) -> Result<Vec<Glob>, CredentialsError> {
    patterns
        .into_iter()
        .map(|pattern| {
            let valid = !pattern.is_empty()
                && pattern
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*' | '?'));
            if valid {
                Ok(Glob(pattern.chars().collect()))
            } else {
                Err(CredentialsError::BadQueuePattern {
                    id: id.to_owned(),
                    list,
                    pattern,
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Credentials, CredentialsError> {
        Credentials::parse(text, Path::new("credentials.toml"))
    }

    const EXAMPLE: &str = r#"
        [[keys]]
        access_key_id = "AKIDEXAMPLE"
        secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
        allow_queues = ["orders-*", "payments.fifo"]
        allow_actions = ["SendMessage", "sqs:receivemessage", "Delete*"]

        [[keys]]
        access_key_id = "ADMIN"
        secret_access_key = "another-secret-of-enough-length"
        allow_queues = ["*"]
        allow_actions = ["*"]
    "#;

    #[test]
    fn keys_allow_their_queues_and_actions_only() {
        let credentials = parse(EXAMPLE).unwrap();
        assert_eq!(credentials.len(), 2);
        let key = credentials.get("AKIDEXAMPLE").unwrap();
        assert_eq!(key.secret(), "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
        assert!(key.may_use_queue("orders-eu"));
        assert!(key.may_use_queue("orders-"));
        assert!(key.may_use_queue("payments.fifo"));
        assert!(!key.may_use_queue("payments"));
        assert!(!key.may_use_queue("my-orders-eu"));
        assert!(key.may_perform("SendMessage"));
        assert!(key.may_perform("ReceiveMessage"));
        assert!(key.may_perform("DeleteMessage"));
        assert!(key.may_perform("DeleteQueue"));
        assert!(!key.may_perform("PurgeQueue"));
        let admin = credentials.get("ADMIN").unwrap();
        assert!(admin.may_use_queue("anything.fifo") && admin.may_perform("PurgeQueue"));
        assert!(credentials.get("NOBODY").is_none());
        assert!(
            !format!("{key:?}").contains("EXAMPLEKEY"),
            "Debug hides the secret"
        );
    }

    #[test]
    fn globs_match_runs_and_single_characters() {
        let glob = |pattern: &str| Glob(pattern.chars().collect());
        assert!(glob("a*b*c").matches("aXXbYYc"));
        assert!(glob("a*b*c").matches("abc"));
        assert!(!glob("a*b*c").matches("acb"));
        assert!(glob("q?").matches("q1") && !glob("q?").matches("q12"));
        assert!(glob("*").matches(""));
        assert!(!glob("").matches("x"));
        assert!(!glob("*a*a*a*a*a*a*b").matches(&"a".repeat(80)));
    }

    #[test]
    fn mistakes_are_refused_naming_the_key_and_entry() {
        let key = |id: &str, secret: &str, queues: &str, actions: &str| {
            format!(
                "[[keys]]\naccess_key_id = {id:?}\nsecret_access_key = {secret:?}\n\
                 allow_queues = [{queues}]\nallow_actions = [{actions}]\n"
            )
        };
        let good_secret = "0123456789abcdef";
        let cases = [
            (key("", good_secret, "", ""), "access_key_id \"\""),
            (key("AK ID", good_secret, "", ""), "AK ID"),
            (
                key("AKID", "short", "", ""),
                "at least 16 characters; it has 5",
            ),
            (key("AKID", good_secret, "\"orders/*\"", ""), "orders/*"),
            (
                key("AKID", good_secret, "", "\"SendMesage\""),
                "\"SendMesage\" of \"AKID\" matches no action",
            ),
            (
                format!(
                    "{}{}",
                    key("AKID", good_secret, "", ""),
                    key("AKID", good_secret, "", "")
                ),
                "defined twice",
            ),
            (String::new(), "defines no [[keys]]"),
            (
                "[[keys]]\naccess_key_id = \"A\"\nsecret = \"x\"\n".to_owned(),
                "unknown field",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(&text).unwrap_err().to_string();
            assert!(
                error.contains(expected),
                "{error:?} should contain {expected:?}"
            );
        }
    }
}
