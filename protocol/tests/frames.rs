//! The worker frames' bytes, frozen: every frame layout is encoded here and compared with its
//! snapshot under `snapshots/v{PROTOCOL_VERSION}/` (nushell keeps `protocol_snapshots/` the same
//! way). A change to any frame's bytes fails until the snapshots and `PROTOCOL_VERSION` move
//! together: `RHO_BLESS=1` writes the snapshots of a version that has none, and never rewrites
//! one that exists. Each snapshot is also read back into the frame it froze.
//!
//! And a property: every answer and every set of questions a worker may encode decodes on the
//! host to what was encoded (`encode_answer` / `decode_answer`, `encode_questions` /
//! `decode_questions`), through the frame codec's bytes.

use std::path::PathBuf;

use proptest::prelude::*;
use rho_plugin_api::{
    Block, Capabilities, Image, LogLevel, Output, Question, Reply, ResourceContents, ResourceLink,
    ToolHints,
};
use rho_protocol::answer::FailureKind;
use rho_protocol::frames::{
    AnswerLayout, Frame, FromWorker, SandboxSpec, ToWorker, decode_answer, decode_questions,
    encode, encode_answer, encode_questions, read_frame,
};
use rho_protocol::{
    Grants, PROTOCOL_VERSION, SandboxReport, ToolSpec, WorkerLimits, grants::GrantPath,
};
use serde_json::json;

/// One frame of each kind and layout: its name, its message and its blobs.
enum Snap {
    To(ToWorker, Vec<u8>),
    From(FromWorker, Vec<u8>),
}

fn sandbox() -> SandboxSpec {
    SandboxSpec {
        enabled: true,
        grants: Grants::default(),
        limits: WorkerLimits::default(),
        identity: Some((65534, 65534)),
        host_pid: 4242,
        scratch_bytes: 64 << 20,
        grant_paths: vec![GrantPath {
            path: "/srv/data".into(),
            write: false,
            dev_ino: (2049, 131_073),
        }],
    }
}

fn answer_of(id: u64, output: &Output, structured: Option<&str>, details: Option<&str>) -> Snap {
    let (message, blobs) = encode_answer(
        id,
        output,
        structured.map(str::to_owned),
        details.map(str::to_owned),
        false,
    );
    Snap::From(message, blobs.concat())
}

fn frames() -> Vec<(&'static str, Snap)> {
    let image = Image::new("image/png", vec![0x89, b'P', b'N', b'G', 0, 1]);
    let mut link = ResourceLink::new("file:///notes.txt", "notes.txt");
    link.mime_type = Some("text/plain".into());
    let blocks = Output::Blocks(vec![
        Block::Text("first".into()),
        Block::Image(image.clone()),
        Block::audio("audio/wav", vec![1, 2, 3]),
        Block::Resource(rho_plugin_api::Resource {
            uri: "file:///a.txt".into(),
            mime_type: Some("text/plain".into()),
            contents: ResourceContents::Text("embedded".into()),
        }),
        Block::Resource(rho_plugin_api::Resource {
            uri: "file:///b.bin".into(),
            mime_type: None,
            contents: ResourceContents::Blob(vec![0, 255]),
        }),
        Block::Link(link),
    ]);
    let questions = [
        Question::confirm("Delete /tmp/x?").with_key("delete"),
        Question::new(
            "Which colour?",
            json!({"type": "object", "properties": {"colour": {"type": "string"}}}),
        ),
    ];
    let (ask, ask_blob) = encode_questions(5, &questions);
    let mut tool = ToolSpec::native("echo", "Echoes its text.", json!({"type": "object"}))
        .with_hints(ToolHints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        });
    tool.title = Some("Echo".into());
    tool.plugin = Some("echo".into());
    tool.plugin_version = Some("0.1.0".into());
    vec![
        (
            "to_start",
            Snap::To(
                ToWorker::Start {
                    protocol: PROTOCOL_VERSION,
                    sandbox: sandbox(),
                },
                Vec::new(),
            ),
        ),
        (
            "to_exec",
            Snap::To(
                ToWorker::Exec {
                    protocol: PROTOCOL_VERSION,
                    sandbox: sandbox(),
                    program: "npx".into(),
                    args: vec!["-y".into(), "server".into()],
                    cwd: "/srv".into(),
                },
                Vec::new(),
            ),
        ),
        (
            "to_call",
            Snap::To(
                ToWorker::Call {
                    id: 1,
                    tool: "echo".into(),
                    call_id: "call-1".into(),
                    time_left_ms: Some(30_000),
                    traceparent: Some(
                        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
                    ),
                },
                br#"{"text":"hi"}"#.to_vec(),
            ),
        ),
        (
            "to_answered",
            Snap::To(
                ToWorker::Answered {
                    id: 5,
                    replies: vec![
                        Reply::Accepted(json!({"colour": "teal"})),
                        Reply::Declined("the user declined".into()),
                        Reply::Cancelled("the host's bound on asking passed".into()),
                    ],
                    time_left_ms: Some(12_000),
                },
                Vec::new(),
            ),
        ),
        (
            "to_cancel",
            Snap::To(ToWorker::Cancel { id: 1 }, Vec::new()),
        ),
        (
            "from_confined",
            Snap::From(
                FromWorker::Confined {
                    protocol: PROTOCOL_VERSION,
                    sandbox: SandboxReport::default(),
                },
                Vec::new(),
            ),
        ),
        (
            "from_ready",
            Snap::From(
                FromWorker::Ready {
                    name: "echo".into(),
                    version: "0.1.0".into(),
                    interface_version: 4,
                    tools: vec![tool],
                    rejected: vec!["libecho.so: tool `x y` refused: a bad name".into()],
                    capabilities: Capabilities::default(),
                },
                Vec::new(),
            ),
        ),
        (
            "from_load_failed",
            Snap::From(
                FromWorker::LoadFailed {
                    error: "libx.so: not a rho plugin".into(),
                },
                Vec::new(),
            ),
        ),
        (
            "from_update",
            Snap::From(
                FromWorker::Update {
                    id: 1,
                    partial: "half way".into(),
                },
                Vec::new(),
            ),
        ),
        (
            "from_log",
            Snap::From(
                FromWorker::Log {
                    id: 1,
                    level: LogLevel::Warning,
                    line: "disk almost full".into(),
                },
                Vec::new(),
            ),
        ),
        ("from_ask", Snap::From(ask, ask_blob)),
        (
            "from_answer_text",
            answer_of(
                1,
                &Output::Text("hi ✓".into()),
                None,
                Some(r#"{"lines":1}"#),
            ),
        ),
        (
            "from_answer_image",
            answer_of(
                2,
                &Output::Image {
                    image: image.clone(),
                    text: "a picture".into(),
                },
                None,
                None,
            ),
        ),
        (
            "from_answer_images",
            answer_of(
                3,
                &Output::Images {
                    images: vec![image.clone(), image],
                    text: String::new(),
                },
                Some(r#"{"count":2}"#),
                None,
            ),
        ),
        ("from_answer_blocks", answer_of(4, &blocks, None, None)),
        (
            "from_failure",
            Snap::From(
                FromWorker::Failure {
                    id: 6,
                    kind: FailureKind::Panic,
                    message: "panicked at src/lib.rs:3:5: boom".into(),
                    details: None,
                    spent: true,
                },
                Vec::new(),
            ),
        ),
    ]
}

fn snapshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("snapshots")
        .join(format!("v{PROTOCOL_VERSION}"))
}

/// Bytes as a person reads them in a failure: the JSON as text, other bytes escaped.
fn shown(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

#[test]
fn every_frame_matches_its_snapshot_of_this_protocol_version() {
    let dir = snapshot_dir();
    let bless = std::env::var_os("RHO_BLESS").is_some();
    if bless {
        std::fs::create_dir_all(&dir).expect("the snapshot directory");
    }
    let snapshots = std::fs::read_dir(dir.parent().expect("snapshots/"))
        .expect("protocol/snapshots/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert!(
        snapshots == [format!("v{PROTOCOL_VERSION}")],
        "protocol/snapshots/ holds {snapshots:?}; it must hold the snapshots of protocol \
         {PROTOCOL_VERSION} alone (a new version: remove the old directory and run with \
         RHO_BLESS=1)"
    );
    let mut names = Vec::new();
    for (name, snap) in frames() {
        let path = dir.join(format!("{name}.frame"));
        let bytes = match &snap {
            Snap::To(message, blob) => encode(message, &[blob]),
            Snap::From(message, blob) => encode(message, &[blob]),
        };
        match std::fs::read(&path) {
            Ok(frozen) => assert!(
                frozen == bytes,
                "the bytes of frame `{name}` changed, but PROTOCOL_VERSION is still \
                 {PROTOCOL_VERSION}: bump it and write the new version's snapshots (RHO_BLESS=1)\n\
                 frozen: {}\n   now: {}",
                shown(&frozen),
                shown(&bytes)
            ),
            Err(_) if bless => std::fs::write(&path, &bytes).expect("a snapshot written"),
            Err(e) => panic!(
                "no snapshot of frame `{name}` for protocol {PROTOCOL_VERSION} ({}: {e}); \
                 RHO_BLESS=1 writes it",
                path.display()
            ),
        }
        // The frozen bytes read back into the frame they froze.
        match snap {
            Snap::To(message, blob) => {
                let frame: Frame<ToWorker> = read_frame(&mut &bytes[..], 1 << 20).expect("read");
                assert_eq!((frame.message, frame.blobs), (message, blob), "{name}");
            }
            Snap::From(message, blob) => {
                let frame: Frame<FromWorker> = read_frame(&mut &bytes[..], 1 << 20).expect("read");
                assert_eq!((frame.message, frame.blobs), (message, blob), "{name}");
            }
        }
        names.push(format!("{name}.frame"));
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("the snapshot directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    names.sort();
    assert_eq!(
        on_disk, names,
        "a snapshot without its frame, or the other way round"
    );
}

/// The bytes of `message` and its blob as a frame, read back as the host reads them.
fn through_the_wire(message: &FromWorker, blob: &[u8]) -> Frame<FromWorker> {
    let bytes = encode(message, &[blob]);
    read_frame(&mut &bytes[..], 1 << 30).expect("a frame")
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), ".{0,40}", "\\PC{0,200}"]
}

fn image() -> impl Strategy<Value = Image> {
    (
        prop_oneof![Just("image/png"), Just("image/jpeg")],
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(mime, bytes)| Image::new(mime, bytes))
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        text().prop_map(Block::Text),
        image().prop_map(Block::Image),
        proptest::collection::vec(any::<u8>(), 0..32).prop_map(|b| Block::audio("audio/wav", b)),
        (text(), proptest::option::of(Just("text/plain".to_owned()))).prop_map(|(t, mime)| {
            Block::Resource(rho_plugin_api::Resource {
                uri: "file:///r".into(),
                mime_type: mime,
                contents: ResourceContents::Text(t),
            })
        }),
        proptest::collection::vec(any::<u8>(), 0..32).prop_map(|b| {
            Block::Resource(rho_plugin_api::Resource {
                uri: "file:///b".into(),
                mime_type: None,
                contents: ResourceContents::Blob(b),
            })
        }),
        "[a-z]{1,8}"
            .prop_map(|name| Block::Link(ResourceLink::new(format!("file:///{name}"), name))),
    ]
}

/// Outputs as a plugin's answer normalised by the host has them (`Image` for one image,
/// `Images` for two or more).
fn output() -> impl Strategy<Value = Output> {
    prop_oneof![
        text().prop_map(Output::Text),
        (image(), text()).prop_map(|(image, text)| Output::Image { image, text }),
        (proptest::collection::vec(image(), 2..6), text())
            .prop_map(|(images, text)| Output::Images { images, text }),
        proptest::collection::vec(block(), 0..8).prop_map(Output::Blocks),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "\\PC{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn question() -> impl Strategy<Value = Question> {
    (
        "\\PC{0,80}",
        prop_oneof![
            Just(json!({"type": "object"})),
            Just(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}})),
        ],
    )
        .prop_map(|(message, schema)| Question::new(message, schema))
}

proptest! {
    #[test]
    fn every_answer_decodes_to_what_was_encoded(
        output in output(),
        structured in proptest::option::of(json_value().prop_map(|v| json!({"value": v}))),
        details in proptest::option::of(json_value().prop_filter("no null", |v| !v.is_null())),
    ) {
        let structured_text = structured.as_ref().map(|v| v.to_string());
        let details_text = details.as_ref().map(|v| v.to_string());
        let (message, blobs) = encode_answer(9, &output, structured_text, details_text, false);
        let frame = through_the_wire(&message, &blobs.concat());
        let FromWorker::Answer { id, kind, text_len, images, blocks, details: d, structured: s, spent } =
            frame.message
        else {
            panic!("not an answer frame");
        };
        prop_assert_eq!((id, spent), (9, false));
        let layout = AnswerLayout { kind, text_len, images, blocks, details: d, structured: s };
        let answer = decode_answer("t", layout, frame.blobs).expect("decodes");
        prop_assert_eq!(answer.output, output);
        prop_assert_eq!(answer.structured, structured);
        prop_assert_eq!(answer.details, details);
    }

    #[test]
    fn every_set_of_questions_decodes_to_what_was_encoded(
        questions in proptest::collection::vec(question(), 1..5),
        keyed in any::<bool>(),
    ) {
        let questions: Vec<Question> = questions
            .into_iter()
            .enumerate()
            .map(|(i, q)| if keyed { q.with_key(format!("q{i}")) } else { q })
            .collect();
        let (message, blob) = encode_questions(3, &questions);
        let frame = through_the_wire(&message, &blob);
        let FromWorker::Ask { id, questions: heads } = frame.message else {
            panic!("not an ask frame");
        };
        prop_assert_eq!(id, 3);
        prop_assert_eq!(decode_questions(&heads, frame.blobs).expect("decodes"), questions);
    }
}
