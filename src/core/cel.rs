//! CEL text shared by the rules' and mutations' CEL forms ([`CelRule`](crate::core::catalogue::CelRule)):
//! macros that expand to string literals, so that a form stays one `&'static str` written beside
//! the Rust form. Each reproduces a Rust helper of the model exactly (the differential test,
//! tests/e2e_policies.rs, holds them to it).
//!
//! Arguments are CEL expressions given as string literals; they are repeated in the expansion.
//! Map keys are sorted before rendering: the apiserver iterates an object's maps in no order, a
//! `BTreeMap` in key order (both compare strings bytewise).

/// [`render_labels`](crate::core::model::selector::render_labels): `a=1,b=2`, `{}` when empty.
#[macro_export]
macro_rules! cel_render_labels {
    ($m:literal) => {
        concat!("(size(", $m, ") == 0 ? '{}' : ", $m, ".map(k, k).sort().map(k, k + '=' + ", $m, "[k]).join(','))")
    };
}

/// [`render`](crate::core::model::selector::render) of a label selector (present): its labels in
/// key order, then its expressions in order (`k in (a,b)`, `k`, `!k`), `{}` when it has neither.
#[macro_export]
macro_rules! cel_render_selector {
    ($s:literal) => {
        concat!(
            "[",
            $s,
            ".?matchLabels.orValue({}).map(k, k).sort().map(k, k + '=' + ",
            $s,
            ".matchLabels[k]) + ",
            $s,
            ".?matchExpressions.orValue([]).map(e, e.operator == 'Exists' ? e.key : e.operator == 'DoesNotExist' ? \
             '!' + e.key : e.key + ' ' + e.operator.lowerAscii() + ' (' + e.?values.orValue([]).join(',') + ')')]\
             .map(p, size(p) == 0 ? '{}' : p.join(','))[0]"
        )
    };
}

/// [`matches`](crate::core::model::selector::matches): whether selector `$s` (present) matches the
/// label map `$l`, with full `matchLabels` + `matchExpressions` semantics.
#[macro_export]
macro_rules! cel_selector_matches {
    ($s:literal, $l:literal) => {
        concat!(
            "(",
            $s,
            ".?matchLabels.orValue({}).all(k, k in ",
            $l,
            " && ",
            $l,
            "[k] == ",
            $s,
            ".matchLabels[k]) && ",
            $s,
            ".?matchExpressions.orValue([]).all(e, e.operator == 'In' ? (e.key in ",
            $l,
            " && ",
            $l,
            "[e.key] in e.?values.orValue([])) : e.operator == 'NotIn' ? (!(e.key in ",
            $l,
            ") || !(",
            $l,
            "[e.key] in e.?values.orValue([]))) : e.operator == 'Exists' ? e.key in ",
            $l,
            " : e.operator == 'DoesNotExist' ? !(e.key in ",
            $l,
            ") : false))"
        )
    };
}

/// Whether selector `$s` (present) is empty (`{}`): neither labels nor expressions
/// ([`is_empty`](crate::core::model::selector::is_empty)).
#[macro_export]
macro_rules! cel_selector_empty {
    ($s:literal) => {
        concat!("(size(", $s, ".?matchLabels.orValue({})) == 0 && size(", $s, ".?matchExpressions.orValue([])) == 0)")
    };
}

/// A workload's pod template labels (`{}` when it has none).
#[macro_export]
macro_rules! cel_template_labels {
    () => {
        "o.spec.template.?metadata.?labels.orValue({})"
    };
}
