//! How commands name a running array: its export name (`vol0`), its UUID (mdadm's
//! `a1b2c3d4:...` form, or any grouping of the 32 hex digits), or the `host:name` stored
//! in its superblock. One decision, used by the server (which array of this process) and
//! by the commands (which process): a word that fits more than one array is never
//! settled by picking the first.

/// What identifies one running array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    /// Export name (what `status` lists as the name).
    pub name: String,
    /// UUID as the server shows it.
    pub uuid: String,
    /// The superblock's name (`host:name` for 1.x arrays; empty for 0.90).
    pub md_name: String,
}

/// The 32 lower-case hex digits of a UUID written with any separators (`:`, `-`, ` `), or
/// None if `s` is not one.
pub fn uuid_digits(s: &str) -> Option<String> {
    let d: String = s
        .chars()
        .filter(|c| !matches!(c, ':' | '-' | ' '))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    (d.len() == 32 && d.chars().all(|c| c.is_ascii_hexdigit())).then_some(d)
}

impl Ident {
    /// Does `spec` name this array (export name, UUID or superblock `host:name`)?
    pub fn matches(&self, spec: &str) -> bool {
        if spec.is_empty() {
            return false;
        }
        if spec == self.name || (!self.md_name.is_empty() && spec == self.md_name) {
            return true;
        }
        match (uuid_digits(spec), uuid_digits(&self.uuid)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// One line naming the array every way a command accepts.
    pub fn describe(&self) -> String {
        if self.md_name.is_empty() || self.md_name == self.name {
            format!("{} (UUID {})", self.name, self.uuid)
        } else {
            format!("{} (UUID {}, {})", self.name, self.uuid, self.md_name)
        }
    }
}

/// The one array `spec` names among `all`, or a sentence saying why there is none: no
/// match (listing what runs), or several (listing them and how to pick one).
pub fn pick(all: &[Ident], spec: &str, wherein: &str) -> Result<usize, String> {
    let hits: Vec<usize> = (0..all.len()).filter(|&i| all[i].matches(spec)).collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!(
            "no running array named {spec:?}{wherein} (running: {}); give its name, UUID or host:name as `raidkit status` shows them",
            if all.is_empty() {
                "none".to_string()
            } else {
                all.iter().map(Ident::describe).collect::<Vec<_>>().join("; ")
            }
        )),
        many => Err(format!(
            "{spec:?} names {} running arrays{wherein}: {}; give the UUID (or host:name where they differ) of the one you mean",
            many.len(),
            many.iter()
                .map(|&i| all[i].describe())
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, uuid: &str, md: &str) -> Ident {
        Ident {
            name: name.into(),
            uuid: uuid.into(),
            md_name: md.into(),
        }
    }

    #[test]
    fn names_uuids_and_host_names_match() {
        let a = id("vol", "80e4136f:0744d35e:0f27b27b:e5073696", "alpha:vol");
        assert!(a.matches("vol"));
        assert!(a.matches("alpha:vol"));
        assert!(a.matches("80e4136f:0744d35e:0f27b27b:e5073696"));
        assert!(a.matches("80E4136F-0744-d35e-0f27-b27be5073696"));
        assert!(!a.matches("beta:vol"));
        assert!(!a.matches("80e4136f"));
        assert!(!a.matches(""));
        assert_eq!(uuid_digits("zz"), None);
    }

    #[test]
    fn two_arrays_of_one_name_are_never_picked_silently() {
        let all = [
            id("dup", "11111111:11111111:11111111:11111111", "alpha:dup"),
            id("dup", "22222222:22222222:22222222:22222222", "beta:dup"),
        ];
        let e = pick(&all, "dup", "").unwrap_err();
        assert!(e.contains("\"dup\" names 2 running arrays"), "{e}");
        assert!(e.contains("11111111:11111111:11111111:11111111"), "{e}");
        assert!(e.contains("beta:dup"), "{e}");
        assert_eq!(pick(&all, "beta:dup", ""), Ok(1));
        assert_eq!(pick(&all, "1111111111111111-1111111111111111", ""), Ok(0));
        let e = pick(&all, "nope", " here").unwrap_err();
        assert!(e.starts_with("no running array named \"nope\" here"), "{e}");
    }
}
