//! The direct canonical JSON writer (`format::canonical_bytes`, what `Digest::of_canonical`
//! hashes) against the reference, the canonical JSON of `serde_json::to_value`: the same bytes
//! for every value, and no bytes (so `of_canonical` takes the `Value` path and returns its
//! error) wherever `to_value` fails. Stored approvals and audit chains hold these digests.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use orca_core::format::{Digest, canonical_bytes, canonical_bytes_via_value, write_canonical};
use orca_core::{PlanContent, Step, StepId, strategy};
use proptest::prelude::*;
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeStruct, Serializer};
use serde_json::Value;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The direct writer gives the reference bytes, or gives up exactly where the reference fails;
/// `of_canonical` then gives the digest of those bytes, or `to_value`'s very error.
fn check<T: Serialize>(value: &T) -> Result<(), TestCaseError> {
    match canonical_bytes_via_value(value) {
        Ok(expected) => {
            let direct = canonical_bytes(value).map(|b| text(&b));
            prop_assert_eq!(direct, Some(text(&expected)));
            prop_assert_eq!(
                Digest::of_canonical(value).unwrap(),
                Digest::of_bytes(&expected)
            );
        }
        Err(error) => {
            prop_assert_eq!(canonical_bytes(value).map(|b| text(&b)), None);
            let again = Digest::of_canonical(value).unwrap_err();
            prop_assert_eq!(again.to_string(), error.to_string());
            prop_assert_eq!(again.classify(), error.classify());
        }
    }
    Ok(())
}

fn assert_same<T: Serialize>(value: &T) {
    check(value).unwrap();
}

fn assert_refused<T: Serialize>(value: &T) {
    assert!(serde_json::to_value(value).is_err());
    check(value).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Arbitrary JSON values.

/// Strings heavy in what needs escaping, and in characters whose escaped order differs from
/// their raw order (`"` < `#` raw, but `\"` sorts after `#`; control characters become `\u00XX`).
fn tricky_string() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,10}",
        "[\\u{0}-\\u{1f}\"#\\\\\\]/aAzé\u{7f}\u{80}\u{2028}€😀]{0,6}",
    ]
}

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        prop::num::f64::ANY,
        prop::sample::select(vec![
            0.0,
            -0.0,
            1e21,
            1e-7,
            1e300,
            -1e-300,
            5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::NAN,
            f64::INFINITY,
            0.1,
            123_456_789.0,
        ]),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ((1u64 << 63)..=u64::MAX).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any_f64().prop_map(Value::from),
        tricky_string().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
            prop::collection::vec((tricky_string(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

// ---------------------------------------------------------------------------------------------
// Every case of the serde data model, in Rust types.

#[derive(Debug, Clone, Serialize)]
struct UnitStruct;

#[derive(Debug, Clone, Serialize)]
struct TupleStruct(i8, String);

#[derive(Debug, Clone, Serialize)]
struct Name(String);

#[derive(Debug, Clone, Serialize)]
struct EmptyStruct {}

#[derive(Debug, Clone, Copy, Serialize)]
enum Color {
    Red,
    #[serde(rename = "gr\"een\n")]
    Green,
}

/// Bytes through `serialize_bytes` (an array of numbers), as `serde_bytes` would.
#[derive(Debug, Clone)]
struct Bytes(Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

/// Written with `collect_str`, as a key or a value.
#[derive(Debug, Clone)]
struct Shown(u16);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}\t", self.0)
    }
}

impl Serialize for Shown {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Every kind of map key: serde_json turns some into strings and refuses the rest.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum AnyKey {
    Str(String),
    Char(char),
    Bool(bool),
    Int(i64),
    Wide(i128),
    Huge(u128),
    Single(f32),
    Double(f64),
    Variant(Color),
    Newtype(Name),
    Shown(Shown),
    Unit(()),
    Absent(Option<u8>),
    List(Vec<u8>),
    Bytes(Bytes),
    Struct(TupleStruct),
}

/// A map written entry by entry, keys in the order given and possibly repeated.
#[derive(Debug, Clone)]
struct Entries(Vec<(AnyKey, Shape)>);

impl Serialize for Entries {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[derive(Debug, Clone, Serialize)]
struct Inner {
    a: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    c: Option<Box<Shape>>,
}

/// Flattened fields arrive as map entries and may repeat a key of the struct: the last wins.
#[derive(Debug, Clone, Serialize)]
struct Flat {
    b: u8,
    #[serde(flatten)]
    inner: Inner,
    #[serde(flatten)]
    rest: BTreeMap<String, i32>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
enum Internally {
    A { x: i32, shape: Box<Shape> },
    B(Inner),
    C,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "t", content = "c")]
enum Adjacently {
    A(Box<Shape>),
    B { y: f32 },
}

#[derive(Debug, Clone, Serialize)]
enum Shape {
    Unit,
    Newtype(Box<Shape>),
    Tuple(Box<Shape>, i16),
    Struct {
        zeta: Box<Shape>,
        alpha: Option<f32>,
        #[serde(rename = "é\"\u{1}")]
        odd: char,
    },
    Small(i8, u16, i32, u32),
    Wide(i128, u128),
    Floats(f32, f64),
    Text(String, char),
    Bytes(Bytes),
    List(Vec<Shape>),
    IntKeys(BTreeMap<i64, Shape>),
    Names(BTreeMap<String, Shape>),
    Entries(Entries),
    Flat(Flat),
    Internally(Internally),
    Adjacently(Adjacently),
    Json(Value),
    Nothing(UnitStruct, Option<u8>, (), EmptyStruct),
    Pair(TupleStruct, (u8, bool)),
    Named(Name, Color, Shown),
}

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        any::<f32>(),
        prop::num::f32::ANY,
        prop::sample::select(vec![
            0.1,
            -0.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-45,
            f32::NAN,
            f32::NEG_INFINITY,
            16_777_217.0,
        ]),
    ]
}

fn any_i128() -> impl Strategy<Value = i128> {
    prop_oneof![
        any::<i128>(),
        any::<i64>().prop_map(i128::from),
        any::<u64>().prop_map(i128::from),
        prop::sample::select(vec![
            i128::from(u64::MAX) + 1,
            i128::from(i64::MIN) - 1,
            i128::from(u64::MAX),
            i128::from(i64::MIN),
        ]),
    ]
}

fn any_u128() -> impl Strategy<Value = u128> {
    prop_oneof![
        any::<u128>(),
        any::<u64>().prop_map(u128::from),
        Just(u128::from(u64::MAX) + 1),
    ]
}

fn any_color() -> impl Strategy<Value = Color> {
    prop_oneof![Just(Color::Red), Just(Color::Green)]
}

fn any_key() -> impl Strategy<Value = AnyKey> {
    prop_oneof![
        "[a-d\"\\u{1}é]{0,2}".prop_map(AnyKey::Str),
        "[a-d]".prop_map(AnyKey::Str),
        any::<char>().prop_map(AnyKey::Char),
        any::<bool>().prop_map(AnyKey::Bool),
        (-3i64..3).prop_map(AnyKey::Int),
        any_i128().prop_map(AnyKey::Wide),
        any_u128().prop_map(AnyKey::Huge),
        any_f32().prop_map(AnyKey::Single),
        any_f64().prop_map(AnyKey::Double),
        any_color().prop_map(AnyKey::Variant),
        "[ab]".prop_map(|s| AnyKey::Newtype(Name(s))),
        any::<u16>().prop_map(|n| AnyKey::Shown(Shown(n))),
        Just(AnyKey::Unit(())),
        prop::option::of(any::<u8>()).prop_map(AnyKey::Absent),
        prop::collection::vec(any::<u8>(), 0..2).prop_map(AnyKey::List),
        Just(AnyKey::Bytes(Bytes(vec![1]))),
        Just(AnyKey::Struct(TupleStruct(1, "x".into()))),
    ]
}

fn any_shape() -> impl Strategy<Value = Shape> {
    let leaf = prop_oneof![
        Just(Shape::Unit),
        (any::<i8>(), any::<u16>(), any::<i32>(), any::<u32>())
            .prop_map(|(a, b, c, d)| Shape::Small(a, b, c, d)),
        (any_i128(), any_u128()).prop_map(|(a, b)| Shape::Wide(a, b)),
        (any_f32(), any_f64()).prop_map(|(a, b)| Shape::Floats(a, b)),
        (tricky_string(), any::<char>()).prop_map(|(s, c)| Shape::Text(s, c)),
        prop::collection::vec(any::<u8>(), 0..4).prop_map(|b| Shape::Bytes(Bytes(b))),
        any_json().prop_map(Shape::Json),
        prop::option::of(any::<u8>()).prop_map(|o| Shape::Nothing(
            UnitStruct,
            o,
            (),
            EmptyStruct {}
        )),
        (any::<i8>(), tricky_string(), any::<u8>(), any::<bool>())
            .prop_map(|(a, s, b, c)| Shape::Pair(TupleStruct(a, s), (b, c))),
        (tricky_string(), any_color(), any::<u16>()).prop_map(|(s, c, n)| Shape::Named(
            Name(s),
            c,
            Shown(n)
        )),
        (
            any::<u8>(),
            prop::collection::btree_map("[a-d]", any::<i32>(), 0..4)
        )
            .prop_map(|(b, rest)| Shape::Flat(Flat {
                b,
                inner: Inner {
                    a: "inner".into(),
                    c: None
                },
                rest
            })),
        any_f32().prop_map(|y| Shape::Adjacently(Adjacently::B { y })),
        Just(Shape::Internally(Internally::C)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let boxed = inner.clone().prop_map(Box::new);
        prop_oneof![
            boxed.clone().prop_map(Shape::Newtype),
            (boxed.clone(), any::<i16>()).prop_map(|(s, n)| Shape::Tuple(s, n)),
            (boxed.clone(), prop::option::of(any_f32()), any::<char>())
                .prop_map(|(zeta, alpha, odd)| Shape::Struct { zeta, alpha, odd }),
            prop::collection::vec(inner.clone(), 0..5).prop_map(Shape::List),
            prop::collection::btree_map(any::<i64>(), inner.clone(), 0..4).prop_map(Shape::IntKeys),
            prop::collection::btree_map(tricky_string(), inner.clone(), 0..4)
                .prop_map(Shape::Names),
            prop::collection::vec((any_key(), inner.clone()), 0..6)
                .prop_map(|e| Shape::Entries(Entries(e))),
            (
                any::<u8>(),
                boxed.clone(),
                prop::collection::btree_map("[a-d]", any::<i32>(), 0..4)
            )
                .prop_map(|(b, c, rest)| Shape::Flat(Flat {
                    b,
                    inner: Inner {
                        a: "inner".into(),
                        c: Some(c)
                    },
                    rest
                })),
            (any::<i32>(), boxed.clone())
                .prop_map(|(x, shape)| Shape::Internally(Internally::A { x, shape })),
            boxed
                .clone()
                .prop_map(|c| Shape::Internally(Internally::B(Inner {
                    a: "b".into(),
                    c: Some(c)
                }))),
            boxed.prop_map(|s| Shape::Adjacently(Adjacently::A(s))),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn json_values_give_the_reference_bytes(value in any_json()) {
        let mut expected = Vec::new();
        write_canonical(&value, &mut expected);
        prop_assert_eq!(canonical_bytes(&value).map(|b| text(&b)), Some(text(&expected)));
        check(&value)?;
    }

    #[test]
    fn rust_values_give_the_reference_bytes_or_its_error(shape in any_shape()) {
        check(&shape)?;
    }

    #[test]
    fn plans_and_executions_give_the_reference_bytes(
        content in strategy::plan_content(8),
        plan in strategy::plan(4),
        run in strategy::run(4),
    ) {
        check(&content)?;
        check(&plan)?;
        check(&run.execution)?;
        for task in &run.tasks {
            check(task)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The edge cases, one by one.

#[test]
fn scalars_are_written_as_serde_json_holds_them() {
    assert_same(&0.1_f32); // widened: 0.10000000149011612
    assert_same(&[f32::NAN, f32::INFINITY, -0.0, f32::MAX, 1e-45]);
    assert_same(&[f64::NAN, f64::NEG_INFINITY, -0.0, 1e300, 5e-324, 1e21, 1e-7]);
    assert_same(&(
        u64::MAX,
        i64::MIN,
        i128::from(u64::MAX),
        i128::from(i64::MIN),
    ));
    assert_same(&(
        u128::from(u64::MAX),
        'x',
        '"',
        '\u{0}',
        "\u{7f}\u{2028}é😀\\/",
    ));
    assert_same(&(Some(3u8), None::<u8>, (), UnitStruct, EmptyStruct {}));
    assert_same(&(
        TupleStruct(-1, "a".into()),
        Name("n".into()),
        Bytes(vec![0, 255]),
    ));
    assert_same(&(Color::Red, Color::Green, Shown(7)));
    assert_refused(&(i128::from(u64::MAX) + 1));
    assert_refused(&(i128::from(i64::MIN) - 1));
    assert_refused(&(u128::from(u64::MAX) + 1));
    assert_eq!(
        text(&canonical_bytes(&0.1_f32).unwrap()),
        "0.10000000149011612"
    );
    assert_eq!(text(&canonical_bytes(&f64::NAN).unwrap()), "null");
}

#[test]
fn enum_variants_are_wrapped_in_their_name() {
    let shapes = [
        Shape::Unit,
        Shape::Newtype(Box::new(Shape::Unit)),
        Shape::Tuple(Box::new(Shape::Unit), 2),
        Shape::Struct {
            zeta: Box::new(Shape::Unit),
            alpha: Some(1.5),
            odd: 'q',
        },
    ];
    for shape in &shapes {
        assert_same(shape);
    }
    assert_eq!(
        text(&canonical_bytes(&shapes).unwrap()),
        r#"["Unit",{"Newtype":"Unit"},{"Tuple":["Unit",2]},{"Struct":{"alpha":1.5,"zeta":"Unit","é\"\u0001":"q"}}]"#
    );
}

#[test]
fn keys_sort_by_their_raw_bytes_not_their_escaped_form() {
    let map: BTreeMap<&str, u8> = [("\u{1}", 1), ("A", 2), ("\"", 3), ("#", 4), ("é", 5)]
        .into_iter()
        .collect();
    assert_same(&map);
    assert_eq!(
        text(&canonical_bytes(&map).unwrap()),
        r##"{"\u0001":1,"\"":3,"#":4,"A":2,"é":5}"##
    );
}

#[test]
fn map_keys_are_turned_into_strings_as_serde_json_does() {
    let ints: HashMap<i32, u8> = [(-1, 1), (10, 2), (9, 3)].into_iter().collect();
    assert_same(&ints);
    assert_same(&BTreeMap::from([(u64::MAX, 1), (0, 2)]));
    assert_same(&BTreeMap::from([(i128::MIN, 1), (i128::MAX, 2)]));
    assert_same(&BTreeMap::from([(u128::MAX, 1)]));
    assert_same(&BTreeMap::from([('k', 1), ('"', 2)]));
    assert_same(&BTreeMap::from([(true, 1), (false, 2)]));
    let keys = [
        AnyKey::Single(0.1),
        AnyKey::Single(-0.0),
        AnyKey::Double(0.1),
        AnyKey::Double(1e300),
        AnyKey::Variant(Color::Green),
        AnyKey::Newtype(Name("n".into())),
        AnyKey::Shown(Shown(3)),
    ];
    for key in keys {
        assert_same(&Entries(vec![(key, Shape::Unit)]));
    }
    // An f32 key is written as an f32, not widened.
    let single = Entries(vec![(AnyKey::Single(0.1), Shape::Unit)]);
    assert_eq!(
        text(&canonical_bytes(&single).unwrap()),
        r#"{"0.1":"Unit"}"#
    );
}

#[test]
fn keys_serde_json_refuses_are_refused_with_its_error() {
    let refused = [
        AnyKey::Single(f32::NAN),
        AnyKey::Double(f64::INFINITY),
        AnyKey::Unit(()),
        AnyKey::Absent(None),
        AnyKey::Absent(Some(1)),
        AnyKey::List(vec![1]),
        AnyKey::Bytes(Bytes(vec![1])),
        AnyKey::Struct(TupleStruct(1, "x".into())),
    ];
    for key in refused {
        assert_refused(&Entries(vec![(key, Shape::Unit)]));
    }
    assert_refused(&BTreeMap::from([(vec![1u8], 1)]));
    // A refused key deep inside, after valid output, refuses the whole value.
    assert_refused(&vec![
        Shape::Unit,
        Shape::Entries(Entries(vec![(AnyKey::Unit(()), Shape::Unit)])),
    ]);
}

#[test]
fn a_repeated_key_keeps_its_last_value_once() {
    let entries = Entries(vec![
        (AnyKey::Str("b".into()), Shape::Small(1, 1, 1, 1)),
        (AnyKey::Str("a".into()), Shape::Unit),
        (AnyKey::Int(1), Shape::Unit),
        (AnyKey::Str("b".into()), Shape::Text("last".into(), 'x')),
        (AnyKey::Char('1'), Shape::Small(2, 2, 2, 2)),
    ]);
    assert_same(&entries);
    assert_eq!(
        text(&canonical_bytes(&entries).unwrap()),
        r#"{"1":{"Small":[2,2,2,2]},"a":"Unit","b":{"Text":["last","x"]}}"#
    );
    let flat = Flat {
        b: 1,
        inner: Inner {
            a: "struct".into(),
            c: None,
        },
        rest: BTreeMap::from([("a".into(), 5), ("b".into(), 6), ("d".into(), 7)]),
    };
    assert_same(&flat);
    assert_eq!(
        text(&canonical_bytes(&flat).unwrap()),
        r#"{"a":5,"b":6,"d":7}"#
    );
}

#[test]
fn nested_json_values_are_canonicalised_too() {
    let value: Value =
        serde_json::from_str(r#"{"b":[1,{"z":0,"y":"é"}],"a":{"c":null,"b":-0.0},"":1e-7}"#)
            .unwrap();
    assert_same(&value);
    assert_same(&Shape::Json(value));
}

/// A struct by serde_json's private name for a raw value (or, with `arbitrary_precision`, a
/// number): the direct writer leaves it to the `Value` path, whatever the features.
struct LooksRaw;

impl Serialize for LooksRaw {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let name = "$serde_json::private::RawValue";
        let mut s = serializer.serialize_struct(name, 1)?;
        s.serialize_field(name, "{\"b\":1,\"a\":2}")?;
        s.end()
    }
}

/// A value given without a key: `to_value` panics, so the direct writer must not succeed.
struct KeylessValue;

impl Serialize for KeylessValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_value(&1)?;
        map.end()
    }
}

/// A key given without a value: `to_value` drops it.
struct ValuelessKey;

impl Serialize for ValuelessKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("a", &1)?;
        map.serialize_key("dangling")?;
        map.end()
    }
}

/// A `Serialize` impl that fails with its own message.
struct Failing;

impl Serialize for Failing {
    fn serialize<S: Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("no way at line 3 column 4"))
    }
}

/// Impls that ignore a failed element, key or value and go on: `to_value` drops what failed,
/// the direct writer may have written part of it, so it must leave these to `to_value`.
struct Swallowing;

impl Serialize for Swallowing {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(None)?;
        let _ = seq.serialize_element(&(1, Failing));
        seq.serialize_element(&1)?;
        let _ = seq.serialize_element(&BTreeMap::from([("a", Failing)]));
        seq.serialize_element(&SwallowingMap)?;
        seq.end()
    }
}

struct SwallowingMap;

impl Serialize for SwallowingMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let _ = map.serialize_entry(&(), &1);
        map.serialize_entry("b", &2)?;
        let _ = map.serialize_entry("c", &Failing);
        map.end()
    }
}

/// The direct writer gives up, and `of_canonical` gives the digest of the reference bytes.
fn assert_left_to_value_path<T: Serialize>(value: &T) {
    assert_eq!(canonical_bytes(value), None);
    let expected = canonical_bytes_via_value(value).unwrap();
    assert_eq!(
        Digest::of_canonical(value).unwrap(),
        Digest::of_bytes(&expected)
    );
}

#[test]
fn what_serde_json_treats_specially_is_left_to_it() {
    assert_left_to_value_path(&LooksRaw);
    assert_left_to_value_path(&Swallowing);
    assert_eq!(
        text(&canonical_bytes_via_value(&Swallowing).unwrap()),
        r#"[1,{"b":2}]"#
    );
    assert_eq!(canonical_bytes(&KeylessValue), None);
    assert_same(&ValuelessKey);
    assert_refused(&Failing);
    assert_refused(&(1, vec![Failing]));
}

// ---------------------------------------------------------------------------------------------
// A large plan.

/// 4 layers × 208 steps, each depending on every step of the layer before: 832 steps, 129,792
/// dependency ids, a 1.2 MB canonical form.
fn layered_plan() -> PlanContent {
    let (layers, width) = (4, 208);
    let id = |l: usize, w: usize| StepId::parse(&format!("l{l}-{w}")).unwrap();
    let mut steps = Vec::new();
    for l in 0..layers {
        for w in 0..width {
            let deps: Vec<StepId> = if l == 0 {
                Vec::new()
            } else {
                (0..width).map(|p| id(l - 1, p)).collect()
            };
            steps.push(
                Step::new(
                    id(l, w),
                    orca_core::AgentId::shell(),
                    format!("layer {l} #{w}"),
                )
                .with_command(format!("echo {l}-{w}"))
                .with_depends_on(deps),
            );
        }
    }
    PlanContent {
        goal: "a wide plan".into(),
        steps,
        assumptions: vec!["a".into()],
        risks: vec!["r".into()],
        verification: vec!["v".into()],
        ..PlanContent::default()
    }
}

/// The large plan's bytes are the reference's. With `ORCA_CANONICAL_TIMING` set, it also
/// prints how long both paths take (run it optimised: `cargo test --release -p orca-core
/// --test canonical large_plan -- --nocapture`).
#[test]
fn a_large_plan_gives_the_reference_bytes() {
    let content = layered_plan();
    let expected = canonical_bytes_via_value(&content).unwrap();
    assert!(expected.len() > 1_000_000, "{}", expected.len());
    assert!(canonical_bytes(&content).unwrap() == expected);
    assert_eq!(content.digest(), Digest::of_bytes(&expected));
    if std::env::var_os("ORCA_CANONICAL_TIMING").is_none() {
        return;
    }
    let value = serde_json::to_value(&content).unwrap();
    let time = |f: &dyn Fn() -> Digest| {
        let mut best = std::time::Duration::MAX;
        for _ in 0..30 {
            let start = std::time::Instant::now();
            std::hint::black_box(f());
            best = best.min(start.elapsed());
        }
        best.as_secs_f64() * 1000.0
    };
    let old = time(&|| Digest::of_canonical_value(&serde_json::to_value(&content).unwrap()));
    let new = time(&|| Digest::of_canonical(&content).unwrap());
    let old_value = time(&|| Digest::of_canonical_value(&serde_json::to_value(&value).unwrap()));
    let new_value = time(&|| Digest::of_canonical(&value).unwrap());
    let held = time(&|| Digest::of_canonical_value(&value));
    println!(
        "{} bytes, {} steps, best of 30\n\
         PlanContent: old {old:.2} ms, new {new:.2} ms, {:.1}x\n\
         serde_json::Value: old {old_value:.2} ms, new {new_value:.2} ms, {:.1}x \
         (of_canonical_value on a Value already held: {held:.2} ms)",
        expected.len(),
        content.steps.len(),
        old / new,
        old_value / new_value,
    );
}
