//! `faults`: a plugin that misbehaves on request, for rho's own tests and benchmarks.
//!
//! In process, `abort`, `segfault` and `exit_process` end the host: call them only in an isolated
//! (out-of-process) source.

use std::time::{Duration, Instant};

use rho_plugin_api::{
    Answer, Block, Ctx, JsonSchema, LogLevel, Question, Reply, ResourceLink, Tool, ToolError,
    export_plugin, json,
};
use serde::{Deserialize, Serialize};

/// Arguments of `panic`.
#[derive(Deserialize, JsonSchema)]
pub struct PanicArgs {
    /// The panic message.
    pub message: String,
}

/// Arguments of `flaky`.
#[derive(Deserialize, JsonSchema)]
pub struct FlakyArgs {
    /// How many of the first calls of `flaky` (in this plugin's process) crash.
    pub crashes: u32,
}

/// Arguments of `sleep`.
#[derive(Deserialize, JsonSchema)]
pub struct SleepArgs {
    /// How long to sleep, in milliseconds.
    pub ms: u64,
}

/// No arguments.
#[derive(Deserialize, JsonSchema)]
pub struct NoArgs {}

/// Arguments of `exit_process`.
#[derive(Deserialize, JsonSchema)]
pub struct ExitArgs {
    /// The exit status.
    pub code: i32,
}

/// Arguments of `big_output`.
#[derive(Deserialize, JsonSchema)]
pub struct BigArgs {
    /// How many bytes of text to answer with.
    pub bytes: usize,
}

/// Arguments of `updates`.
#[derive(Deserialize, JsonSchema)]
pub struct UpdatesArgs {
    /// How many partial updates to send.
    pub count: u32,
    /// Pause between two updates, in milliseconds.
    pub interval_ms: u64,
}

/// Arguments of `print`.
#[derive(Deserialize, JsonSchema)]
pub struct PrintArgs {
    /// What to print on stdout and stderr.
    pub text: String,
}

/// Arguments of `alloc`.
#[derive(Deserialize, JsonSchema)]
pub struct AllocArgs {
    /// How many MiB to allocate and touch.
    pub mib: usize,
}

/// Arguments of `getenv`.
#[derive(Deserialize, JsonSchema)]
pub struct EnvArgs {
    /// The variable's name.
    pub name: String,
}

/// Arguments of `fail`.
#[derive(Deserialize, JsonSchema)]
pub struct FailArgs {
    /// The error message.
    pub message: String,
}

fn panic_tool(args: PanicArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    panic!("{}", args.message)
}

fn flaky(args: FlakyArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if n <= args.crashes {
        panic!("flaky: call {n} crashes (the first {} do)", args.crashes);
    }
    Ok(Answer::text(format!("call {n} answered")))
}

fn panic_payload(_: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    std::panic::panic_any(42_u32)
}

fn sleep(args: SleepArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let end = Instant::now() + Duration::from_millis(args.ms);
    while Instant::now() < end {
        if ctx.is_cancelled() {
            return Err(ToolError::new("cancelled while sleeping"));
        }
        std::thread::sleep(
            Duration::from_millis(2).min(end.saturating_duration_since(Instant::now())),
        );
    }
    Ok(Answer::text(format!("slept {} ms", args.ms)))
}

fn doze(args: SleepArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    std::thread::sleep(Duration::from_millis(args.ms));
    Ok(Answer::text(format!("dozed {} ms", args.ms)))
}

fn spin(_: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

fn spin_cancellable(_: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let start = Instant::now();
    while !ctx.is_cancelled() {
        std::hint::spin_loop();
    }
    Err(ToolError::new(format!(
        "cancelled after {} ms",
        start.elapsed().as_millis()
    )))
}

fn abort(_: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    std::process::abort()
}

fn segfault(_: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let null = std::hint::black_box(std::ptr::null_mut::<u8>());
    // SAFETY: none: this tool exists to crash its process with SIGSEGV.
    unsafe { null.write_volatile(1) };
    Ok(Answer::text("unreachable"))
}

fn exit_process(args: ExitArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    std::process::exit(args.code)
}

fn big_output(args: BigArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::text("x".repeat(args.bytes)))
}

fn raw_image(args: BigArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let bytes: Vec<u8> = (0..args.bytes).map(|i| (i % 251) as u8).collect();
    Ok(Answer::image(
        "image/x-rho-test",
        bytes,
        format!("{} bytes", args.bytes),
    ))
}

fn updates(args: UpdatesArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    for i in 1..=args.count {
        if ctx.is_cancelled() {
            return Err(ToolError::new(format!("cancelled after {} updates", i - 1)));
        }
        ctx.update(format!("update {i}/{}", args.count));
        std::thread::sleep(Duration::from_millis(args.interval_ms));
    }
    Ok(Answer::text(format!("sent {} updates", args.count)))
}

fn log_levels(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    ctx.log(LogLevel::Debug, "debug line");
    ctx.log(LogLevel::Info, "info line");
    ctx.update("between the lines");
    ctx.log(LogLevel::Warning, "warning line");
    ctx.log(LogLevel::Error, "error line");
    Ok(Answer::text("logged 4 lines"))
}

fn print(args: PrintArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    println!("{}", args.text);
    eprintln!("{}", args.text);
    Ok(Answer::text(format!("printed {} bytes", args.text.len())))
}

fn alloc(args: AllocArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let mut block = vec![0u8; args.mib << 20];
    for page in block.chunks_mut(4096) {
        page[0] = 1;
    }
    let touched = std::hint::black_box(&block)
        .iter()
        .step_by(4096)
        .filter(|b| **b == 1)
        .count();
    Ok(Answer::text(format!("touched {touched} pages")))
}

fn fail(args: FailArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Err(ToolError::new(args.message).with_details(json!({ "reason": "asked to fail" })))
}

/// Arguments of `wide_details`.
#[derive(Deserialize, JsonSchema)]
pub struct WideArgs {
    /// How many numbers the details list.
    pub items: usize,
}

fn wide_details(args: WideArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let items: Vec<usize> = (0..args.items).collect();
    Ok(Answer::text(format!("{} items", args.items)).with_details(json!({ "items": items })))
}

/// Arguments of `write_file`.
#[derive(Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// The file to write (made or replaced).
    pub path: String,
    /// What to write.
    pub text: String,
    /// Write it this many times.
    #[serde(default = "one")]
    pub times: usize,
}

fn one() -> usize {
    1
}

fn write_file(args: WriteArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    use std::io::Write;
    let mut file = std::fs::File::create(&args.path)?;
    for _ in 0..args.times {
        file.write_all(args.text.as_bytes())?;
    }
    Ok(Answer::text(format!(
        "wrote {} bytes",
        args.text.len() * args.times
    )))
}

/// Arguments of `connect`.
#[derive(Deserialize, JsonSchema)]
pub struct ConnectArgs {
    /// `HOST:PORT` to open a TCP connection to.
    pub addr: String,
}

fn connect(args: ConnectArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let addr: std::net::SocketAddr = args
        .addr
        .parse()
        .map_err(|e| ToolError::new(format!("not an address: {e}")))?;
    std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2))?;
    Ok(Answer::text("connected"))
}

fn getenv(args: EnvArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::text(
        std::env::var(&args.name).unwrap_or_else(|_| "(unset)".into()),
    ))
}

fn fds(_: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let mut fds: Vec<u32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    let list: Vec<String> = fds.iter().map(u32::to_string).collect();
    Ok(Answer::text(list.join(",")))
}

fn build_tag(_: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::text(
        option_env!("RHO_FAULTS_TAG").unwrap_or("default"),
    ))
}

/// Arguments of `count`.
#[derive(Deserialize, JsonSchema)]
pub struct CountArgs {
    /// The count to answer (0 breaks the declared schema).
    pub n: u32,
}

/// What `count` answers: its schema says `n` is at least 1.
#[derive(Serialize, JsonSchema)]
pub struct Count {
    /// The count.
    #[schemars(range(min = 1))]
    pub n: u32,
    /// The count in words.
    pub words: String,
}

/// Answers `args.n` as structured data, whatever its schema says.
pub fn count(args: CountArgs, _ctx: &Ctx) -> Result<Count, ToolError> {
    Ok(Count {
        n: args.n,
        words: format!("{} things", args.n),
    })
}

/// Answers structured content (and other text) though it declares no output schema.
pub fn unschema(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let mut answer = Answer::text("plain text");
    answer.structured = Some(json!({"approved": true}));
    Ok(answer)
}

/// Answers what the host told the call: its time left (ms) and trace context.
/// Arguments of `ask`.
#[derive(Deserialize, JsonSchema)]
pub struct AskArgs {
    /// The question.
    pub message: String,
    /// The answer's JSON Schema (default: a yes-or-no `confirm`).
    #[serde(default)]
    pub schema: Option<rho_plugin_api::Value>,
    /// How many times to ask it (default 1).
    #[serde(default)]
    pub times: Option<u32>,
    /// Ask it once under each of these keys, all at once (`Ctx::ask_all`), instead.
    #[serde(default)]
    pub keys: Option<Vec<String>>,
}

/// Asks the user, then answers each reply and the time left after it, as JSON.
fn ask(args: AskArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let question = match args.schema {
        Some(schema) => Question::new(args.message, schema),
        None => Question::confirm(args.message),
    };
    let before = ctx.time_left().map(|left| left.as_millis() as u64);
    let report = |reply: Reply| {
        let (kind, value) = match reply {
            Reply::Accepted(answer) => ("accepted", answer),
            Reply::Declined(why) => ("declined", json!(why)),
            Reply::Cancelled(why) => ("cancelled", json!(why)),
        };
        let left = ctx.time_left().map(|left| left.as_millis() as u64);
        json!({"reply": kind, "value": value, "time_left_ms": left, "cancelled": ctx.is_cancelled()})
    };
    let replies: Vec<_> = match args.keys {
        Some(keys) => {
            let questions = keys
                .into_iter()
                .map(|key| question.clone().with_key(key))
                .collect();
            ctx.ask_all(questions).into_iter().map(report).collect()
        }
        None => (0..args.times.unwrap_or(1))
            .map(|_| report(ctx.ask(question.clone())))
            .collect(),
    };
    Ok(Answer::text(
        json!({"time_left_ms_before": before, "replies": replies}).to_string(),
    ))
}

/// Answers one block of each kind, in a fixed order: text, audio, an embedded text resource, an
/// image, an embedded blob, a link, text.
fn blocks(_args: NoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    Ok(Answer::blocks(vec![
        Block::text("first"),
        Block::audio("audio/wav", b"RIFF-not-really".to_vec()),
        Block::resource_text("file:///notes.txt", "text/plain", "a note"),
        Block::image("image/png", vec![0x89, b'P', b'N', b'G']),
        Block::resource_blob(
            "file:///data.bin",
            "application/octet-stream",
            vec![0, 1, 2, 255],
        ),
        Block::Link(
            ResourceLink::new("file:///big.log", "big.log")
                .with_mime_type("text/plain")
                .with_description("the whole log"),
        ),
        Block::text("last"),
    ]))
}

pub fn call_info(_args: NoArgs, ctx: &Ctx) -> Result<Answer, ToolError> {
    let left = ctx.time_left().map(|left| left.as_millis() as u64);
    Ok(Answer::text(
        json!({"time_left_ms": left, "traceparent": ctx.traceparent(), "call_id": ctx.call_id()})
            .to_string(),
    ))
}

export_plugin! {
    Tool::structured("count", "Answers a count as structured data (n = 0 breaks its schema).", count)
        .title("Count")
        .read_only(true)
        .idempotent(true)
        .open_world(false),
    Tool::new("call_info", "Answers the call's id, time left and traceparent.", call_info).read_only(true),
    Tool::new("big_output_cut", "Answers with that many bytes of text; its result limit is 100 bytes.", big_output)
        .max_result_bytes(100),
    Tool::new("nap", "Sleeps for ms milliseconds, read-only.", sleep).read_only(true),
    Tool::new("unschema", "Answers structured content without declaring an output schema.", unschema),
    Tool::new("panic", "Panics with the given message.", panic_tool),
    Tool::new("flaky", "Panics on the first calls (crashes of them), then answers.", flaky),
    Tool::new("panic_payload", "Panics with a non-string payload.", panic_payload),
    Tool::new("sleep", "Sleeps for ms milliseconds; stops early when cancelled.", sleep),
    Tool::new("spin", "Busy-loops forever and ignores cancellation.", spin),
    Tool::new("doze", "Sleeps for ms milliseconds in one go, ignoring cancellation.", doze),
    Tool::new("spin_cancellable", "Busy-loops until cancelled.", spin_cancellable),
    Tool::new("abort", "Aborts its process.", abort),
    Tool::new("segfault", "Writes through a null pointer.", segfault),
    Tool::new("exit_process", "Exits its process with the given status.", exit_process),
    Tool::new("big_output", "Answers with that many bytes of text.", big_output),
    Tool::new("raw_image", "Answers with an image of that many (meaningless) bytes.", raw_image),
    Tool::new("updates", "Sends count partial updates, then answers.", updates),
    Tool::new("heartbeat", "Sends count partial updates, interval_ms apart; its idle limit is 500 ms.", updates)
        .idle_timeout_ms(500),
    Tool::new("print", "Prints the text on stdout and stderr, then answers.", print),
    Tool::new("log_levels", "Logs one line at debug, info, warning and error.", log_levels),
    Tool::new("ask", "Asks the user (times times), then answers the replies and the time left.", ask)
        .read_only(true)
        .timeout_ms(3000),
    Tool::new("blocks", "Answers text, audio, resources, an image and a link, in order.", blocks).read_only(true),
    Tool::new("alloc", "Allocates and touches that many MiB.", alloc),
    Tool::new("fail", "Answers with an error with details.", fail),
    Tool::new("wide_details", "Answers with details listing that many numbers.", wide_details),
    Tool::new("getenv", "Answers with an environment variable's value, or (unset).", getenv),
    Tool::new("write_file", "Writes the text to a file, times times.", write_file),
    Tool::new("connect", "Opens a TCP connection to an address.", connect),
    Tool::new("fds", "Lists the process's open file descriptors.", fds),
    Tool::new("build_tag", "Answers with the tag this library was built with.", build_tag),
    Tool::new("slow", "Sleeps for ms milliseconds; its own timeout is 1000 ms.", sleep).timeout_ms(1000),
}
