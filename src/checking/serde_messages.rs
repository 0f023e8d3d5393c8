//! Serde's error messages rephrased in the config's terms.

use super::error::suggestion_suffix;

/// Keys that exist in a raw struct only to be refused with a better message;
/// never suggested, never listed as allowed.
const NEVER_SUGGESTED: &[&str] = &["bearer_token", "password", "api_key"];

/// Rephrases serde's messages in the config's terms: "key" rather than
/// "field", a did-you-mean for unknown keys and values, and "expected X,
/// found Y" for type errors.
pub(crate) fn rewrite_serde_message(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (wrong, allowed) = split_unknown(rest);
        let allowed: Vec<&str> = allowed
            .into_iter()
            .filter(|k| !NEVER_SUGGESTED.contains(k))
            .collect();
        let suggestion = suggestion_suffix(wrong, allowed.iter().copied(), '`');
        if allowed.is_empty() {
            return format!("unknown key `{wrong}`: this table takes no keys");
        }
        return format!(
            "unknown key `{wrong}`{suggestion}; the keys allowed here are: {}",
            allowed.join(", ")
        );
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (wrong, allowed) = split_unknown(rest);
        let suggestion = suggestion_suffix(wrong, allowed.iter().copied(), '"');
        let list: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
        return format!(
            "unknown value \"{wrong}\"{suggestion}; expected one of: {}",
            list.join(", ")
        );
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            let expected = match expected {
                "a sequence" => "a list like [\"a\", \"b\"]",
                "a boolean" => "true or false",
                other => other,
            };
            return format!("expected {expected}, found {found}");
        }
    }
    if let Some(rest) = message.strip_prefix("invalid value: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            return format!("expected {expected}, found {found}");
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let name = rest.trim_end_matches('`');
        return format!("missing required key `{name}`");
    }
    message.to_string()
}

/// Splits "`x`, expected one of `a`, `b`" (after the opening backtick) into
/// the unknown word and the allowed words.
fn split_unknown(rest: &str) -> (&str, Vec<&str>) {
    let (wrong, tail) = rest.split_once('`').unwrap_or((rest, ""));
    let allowed = tail
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.is_empty())
        .collect();
    (wrong, allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_become_config_messages() {
        assert_eq!(
            rewrite_serde_message("unknown field `segmnt_size`, expected one of `segment_size`, `max_bytes`"),
            "unknown key `segmnt_size` (did you mean `segment_size`?); the keys allowed here are: segment_size, max_bytes"
        );
        assert_eq!(
            rewrite_serde_message("unknown field `x`, expected `a` or `b`"),
            "unknown key `x`; the keys allowed here are: a, b"
        );
        assert_eq!(
            rewrite_serde_message("unknown variant `alway`, expected one of `always`, `interval`, `never`"),
            "unknown value \"alway\" (did you mean \"always\"?); expected one of: \"always\", \"interval\", \"never\""
        );
        assert_eq!(
            rewrite_serde_message("invalid type: integer `5`, expected a string"),
            "expected a string, found integer `5`"
        );
    }
}
