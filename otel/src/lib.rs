//! OpenTelemetry for rho: a host's tool calls as spans and metrics, exported over OTLP.
//!
//! [`OtelExport`] follows a [`Host`]'s bus as the journal and the NATS export do: every call
//! becomes one `execute_tool {tool}` span (kind INTERNAL) from its start to its end, parented
//! by the call's trace context when its caller gave one
//! ([`CallOptions::traceparent`](rho_runtime::CallOptions::traceparent)), with the GenAI
//! semantic conventions' attributes (`gen_ai.operation.name`, `gen_ai.tool.name`,
//! `gen_ai.tool.call.id`, `gen_ai.tool.type`, `error.type`: rho's outcome for every outcome but
//! `ok`, `tool_error` for `error`) and rho's own (`rho.outcome`, `rho.plugin.name`,
//! `rho.plugin.version`, `rho.source`, `rho.isolation`, `rho.gate.wait_ms`, and where a policy or
//! limit is in force `rho.decision` and `rho.policy.ids`); and each call's
//! duration goes to the `gen_ai.execute_tool.duration` histogram (seconds). An MCP server adds
//! its own spans and metric through [`OtelExport::server_span`].
//!
//! # What a call never waits for
//!
//! The bus hands the events to a bounded queue inside `publish` and returns; a task of the
//! tokio runtime turns them into spans and exports them in batches (at most one second apart).
//! When the queue is full (the receiver is down or slow) events are dropped, never waited for:
//! the drops are counted, and an `export_status` event on the bus says how many, and why the
//! receiver is not reached, whenever that changes (at most once a second).
//!
//! # Arguments and results
//!
//! They may hold secrets: they are exported only when [`OtelConfig::export_arguments`] says so
//! (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`).
//!
//! # Configuration
//!
//! [`OtelConfig`] is `[otel]` of `rho.toml` for the CLI, with the standard environment variables
//! ([`OtelConfig::with_env`]): `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`
//! (`http/protobuf`, `grpc`), `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_SDK_DISABLED`. Nothing is exported without an endpoint; `OTEL_SDK_DISABLED=true` wins
//! over everything.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use rho_otel::{OtelConfig, OtelExport};
//! let (host, _) = rho_runtime::Host::builder().build().await?;
//! let config = OtelConfig {
//!     endpoint: Some("http://127.0.0.1:4318".into()),
//!     ..OtelConfig::default()
//! };
//! let export = OtelExport::start(&host, &config)?;
//! host.call("echo", serde_json::json!({"text": "hi"})).await;
//! // Before the process exits: what is queued goes out.
//! export.shutdown().await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod spans;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry_otlp::RetryPolicy;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use rho_runtime::{Event, EventType, Host, Sink};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub use spans::ServerSpan;

/// How spans and metrics travel to the receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    /// OTLP over HTTP, protobuf bodies (`http/protobuf`; port 4318 by convention).
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// OTLP over gRPC (`grpc`; port 4317 by convention).
    #[serde(rename = "grpc")]
    Grpc,
}

impl Protocol {
    /// The protocol named `text` as `OTEL_EXPORTER_OTLP_PROTOCOL` names it.
    pub fn parse(text: &str) -> Option<Protocol> {
        match text.trim() {
            "http/protobuf" => Some(Protocol::HttpProtobuf),
            "grpc" => Some(Protocol::Grpc),
            _ => None,
        }
    }
}

/// Where and how to export (`[otel]` in `rho.toml`). Off unless it has an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtelConfig {
    /// The receiver's base URL (`http://HOST:4318` for HTTP: the signals go to `/v1/traces` and
    /// `/v1/metrics` under it; `http://HOST:4317` for gRPC). `None`: nothing is exported.
    pub endpoint: Option<String>,
    /// How to reach it.
    pub protocol: Protocol,
    /// `service.name` of everything exported (default `rho`).
    pub service_name: String,
    /// More resource attributes (`deployment.environment`, ...).
    pub resource_attributes: std::collections::BTreeMap<String, String>,
    /// Export nothing, whatever else says so.
    pub disabled: bool,
    /// Export calls' arguments and results (they may hold secrets; off by default).
    pub export_arguments: bool,
    /// The most events waiting for the exporter; past it they are dropped and counted
    /// (16 to 1,048,576; default 8192).
    pub queue: usize,
    /// How often the metrics go out, milliseconds (100 to 3,600,000; default 10,000).
    pub metric_interval_ms: u64,
    /// How long one export may take, milliseconds (100 to 60,000; default 10,000).
    pub timeout_ms: u64,
    /// How long the export may hold a process that exits, milliseconds (0 to 60,000; default
    /// 1,000): what is queued goes out in one try within it (no retries), and what did not is
    /// reported ([`ExitReport`]). While running, a failed export is retried (3 times, backoff
    /// from 100 ms).
    pub exit_timeout_ms: u64,
}

impl Default for OtelConfig {
    fn default() -> Self {
        OtelConfig {
            endpoint: None,
            protocol: Protocol::default(),
            service_name: "rho".into(),
            resource_attributes: Default::default(),
            disabled: false,
            export_arguments: false,
            queue: 8192,
            metric_interval_ms: 10_000,
            timeout_ms: 10_000,
            exit_timeout_ms: 1_000,
        }
    }
}

/// Why an export could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// A setting is out of its range or unusable.
    #[error("otel: {0}")]
    Config(String),
    /// The exporter could not be built (its protocol's feature is off, a bad endpoint).
    #[error("otel: the {protocol} exporter to {endpoint} could not be built: {reason}")]
    Exporter {
        /// The protocol.
        protocol: &'static str,
        /// The endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
}

impl OtelConfig {
    /// This configuration with the standard environment variables applied: an endpoint,
    /// protocol or service name the configuration does not set comes from
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL` (when the configuration
    /// leaves the default), `OTEL_SERVICE_NAME`; `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k2=v2`) adds
    /// attributes; `OTEL_SDK_DISABLED=true` disables. `Err`: a protocol that is neither
    /// `http/protobuf` nor `grpc`.
    pub fn with_env(self) -> Result<OtelConfig, OtelError> {
        self.with_vars(|name| std::env::var(name).ok())
    }

    /// [`OtelConfig::with_env`] with the variables `var` gives.
    pub fn with_vars(
        mut self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<OtelConfig, OtelError> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if self.endpoint.is_none() {
            self.endpoint = set("OTEL_EXPORTER_OTLP_ENDPOINT").map(|v| v.trim().to_owned());
        }
        if let Some(protocol) = set("OTEL_EXPORTER_OTLP_PROTOCOL")
            && self.protocol == Protocol::default()
        {
            self.protocol = Protocol::parse(&protocol).ok_or_else(|| {
                OtelError::Config(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL `{protocol}` is not `http/protobuf` or `grpc`"
                ))
            })?;
        }
        if self.service_name == OtelConfig::default().service_name
            && let Some(name) = set("OTEL_SERVICE_NAME")
        {
            self.service_name = name;
        }
        if let Some(attributes) = set("OTEL_RESOURCE_ATTRIBUTES") {
            for pair in attributes.split(',') {
                if let Some((key, value)) = pair.split_once('=') {
                    self.resource_attributes
                        .entry(key.trim().to_owned())
                        .or_insert_with(|| value.trim().to_owned());
                }
            }
        }
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            self.disabled = true;
        }
        Ok(self)
    }

    /// Whether anything is exported: an endpoint, and not disabled.
    pub fn enabled(&self) -> bool {
        !self.disabled && self.endpoint.is_some()
    }

    /// Checks the ranges.
    pub fn check(&self) -> Result<(), OtelError> {
        let within = |name: &str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                Ok(())
            } else {
                Err(OtelError::Config(format!(
                    "otel.{name} is {value}; it must be {low} to {high}"
                )))
            }
        };
        within("queue", self.queue as u64, 16, 1 << 20)?;
        within(
            "metric_interval_ms",
            self.metric_interval_ms,
            100,
            3_600_000,
        )?;
        within("timeout_ms", self.timeout_ms, 100, 60_000)?;
        within("exit_timeout_ms", self.exit_timeout_ms, 0, 60_000)?;
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(OtelError::Config(format!(
                "otel.endpoint `{endpoint}` is not an http:// or https:// URL"
            )));
        }
        Ok(())
    }

    /// The resource of everything exported.
    fn resource(&self) -> Resource {
        let attributes = self
            .resource_attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()));
        Resource::builder_empty()
            .with_service_name(self.service_name.clone())
            .with_attributes(attributes)
            .build()
    }

    /// The endpoint of one signal: HTTP appends its path to the base URL, gRPC takes it as is.
    fn signal_endpoint(&self, path: &str) -> String {
        let base = self.endpoint.as_deref().unwrap_or_default();
        match self.protocol {
            Protocol::HttpProtobuf => format!("{}/{path}", base.trim_end_matches('/')),
            Protocol::Grpc => base.to_owned(),
        }
    }
}

/// What the queue carries to the export task.
enum Item {
    /// An event of the bus (a call's start, its gate's verdict, its end, a plugin change).
    Event(Arc<Event>),
    /// A span already made (an MCP server's).
    Span(Box<SpanData>),
    /// Export what is queued and stop.
    Stop,
}

/// The bus's end of the queue: never waits; a full queue drops and counts.
struct QueueSink {
    queue: Queue,
}

/// The exporter's queue, as its producers see it: items go in without waiting (a full queue
/// drops them, counted); the exporter wakes for the first of a burst, then takes what gathers
/// for [`spans::DRAIN_EVERY`] in one go, sooner when the queue is half full: a call's events
/// cost no thread wake-up of their own while calls run, and an idle host only for its
/// once-a-second flush.
#[derive(Clone)]
pub(crate) struct Queue {
    sender: mpsc::Sender<Item>,
    half: usize,
    wake: Arc<tokio::sync::Notify>,
    dropped: Arc<AtomicU64>,
}

impl Queue {
    /// Queues `item`, or counts it dropped when the queue is full; wakes the exporter when the
    /// queue is half full or more.
    fn push(&self, item: Item) {
        if self.sender.try_send(item).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.wake.notify_one();
        } else if self.sender.capacity() <= self.half {
            self.wake.notify_one();
        }
    }
}

impl Sink for QueueSink {
    fn accept(&self, event: &Arc<Event>) {
        let wanted = matches!(
            event.kind.event_type(),
            EventType::ToolExecutionStart
                | EventType::ToolRunning
                | EventType::ToolExecutionEnd
                | EventType::PluginLoaded
                | EventType::PluginReloaded
                | EventType::PluginRemoved
                | EventType::RemoteToolsChanged
                | EventType::SourceStateChanged
        );
        if wanted {
            self.queue.push(Item::Event(event.clone()));
        }
    }
}

/// A running export of a host's calls (see the crate's documentation). Clones share it.
#[derive(Clone)]
pub struct OtelExport {
    queue: Queue,
    task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<ExitReport>>>>,
    server_duration: Histogram<f64>,
    /// The bound on [`OtelExport::shutdown`].
    exit_within: Duration,
    /// Where it exports.
    destination: String,
    /// Whether arguments and results are exported.
    pub export_arguments: bool,
}

impl OtelExport {
    /// Starts exporting `host`'s calls as `config` says (in the tokio runtime this is called
    /// in). `Err`: a setting out of range, or an exporter that cannot be built (its protocol's
    /// feature is off).
    pub fn start(host: &Host, config: &OtelConfig) -> Result<OtelExport, OtelError> {
        config.check()?;
        let endpoint = config
            .endpoint
            .clone()
            .ok_or_else(|| OtelError::Config("no endpoint to export to".into()))?;
        let resource = config.resource();
        let timeout = Duration::from_millis(config.timeout_ms);
        let exit_within = Duration::from_millis(config.exit_timeout_ms);
        let mut spans = exporters::spans(config, timeout, RetryPolicy::recommended())?;
        spans.set_resource(&resource);
        // At exit, one try bounded by the exit's own time.
        let mut last_spans = exporters::spans(
            config,
            exit_within.max(Duration::from_millis(1)),
            RetryPolicy::disabled(),
        )?;
        last_spans.set_resource(&resource);
        // Metrics are cumulative: one that fails goes out with the next period's, no retries
        // (which would hold an exiting process for the backoff).
        let metrics = exporters::metrics(config, timeout)?;
        let reader = opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader::builder(
            metrics,
            opentelemetry_sdk::runtime::Tokio,
        )
        .with_interval(Duration::from_millis(config.metric_interval_ms))
        .with_timeout(timeout)
        .build();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(reader)
            .build();
        let meter = meters.meter("rho");
        let tool_duration = meter
            .f64_histogram("gen_ai.execute_tool.duration")
            .with_unit("s")
            .with_description("Duration of tool executions")
            .build();
        let server_duration = meter
            .f64_histogram("mcp.server.operation.duration")
            .with_unit("s")
            .with_description("Duration of MCP requests a server handled")
            .build();
        let (sender, received) = mpsc::channel(config.queue);
        let dropped = Arc::new(AtomicU64::new(0));
        let wake = Arc::new(tokio::sync::Notify::new());
        let queue = Queue {
            sender,
            half: config.queue / 2,
            wake: wake.clone(),
            dropped: dropped.clone(),
        };
        host.bus().add_sink(Arc::new(QueueSink {
            queue: queue.clone(),
        }));
        let worker = spans::Worker {
            host: host.clone(),
            exporter: spans,
            last_exporter: last_spans,
            meters,
            tool_duration,
            received,
            wake,
            dropped,
            destination: format!(
                "otlp {} {endpoint}",
                match config.protocol {
                    Protocol::HttpProtobuf => "http/protobuf",
                    Protocol::Grpc => "grpc",
                }
            ),
            export_arguments: config.export_arguments,
        };
        let destination = worker.destination.clone();
        let task = tokio::spawn(worker.run());
        Ok(OtelExport {
            queue,
            task: Arc::new(std::sync::Mutex::new(Some(task))),
            server_duration,
            export_arguments: config.export_arguments,
            exit_within,
            destination,
        })
    }

    /// How many events and spans were dropped so far (the queue full, an export failed).
    pub fn dropped(&self) -> u64 {
        self.queue.dropped.load(Ordering::Relaxed)
    }

    /// Records an MCP server's span (kind SERVER) and its `mcp.server.operation.duration`;
    /// never waits (a full queue drops it, counted).
    pub fn server_span(&self, span: ServerSpan) {
        let (data, seconds, attributes) = span.into_data();
        self.server_duration.record(seconds, &attributes);
        self.queue.push(Item::Span(Box::new(data)));
    }

    /// Exports what is queued, in one try, and stops: what a process does before it exits.
    /// Bounded by [`OtelConfig::exit_timeout_ms`] whatever the receiver does (down, slow,
    /// unreachable); the report says what did not go out and why. Later calls are no longer
    /// exported; a second call reports nothing more.
    pub async fn shutdown(&self) -> ExitReport {
        let started = std::time::Instant::now();
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(mut task) = task else {
            return ExitReport::default();
        };
        // The bus's sink keeps a sender, so the queue never closes: the task is told to stop.
        let _ = self.queue.sender.try_send(Item::Stop);
        self.queue.wake.notify_one();
        let finished = tokio::time::timeout(self.exit_within, &mut task).await;
        let mut report = match finished {
            Ok(Ok(report)) => report,
            Ok(Err(_)) => ExitReport {
                reason: Some("the export task failed".into()),
                ..ExitReport::default()
            },
            Err(_) => {
                task.abort();
                ExitReport {
                    reason: Some(format!(
                        "no answer within otel.exit_timeout_ms = {} ms",
                        self.exit_within.as_millis()
                    )),
                    unfinished: true,
                    ..ExitReport::default()
                }
            }
        };
        report.dropped = report.dropped.max(self.dropped());
        report.destination = self.destination.clone();
        report.waited = started.elapsed();
        report
    }
}

/// What an export did not send by the time its process exits ([`OtelExport::shutdown`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitReport {
    /// Where it exports (`otlp http/protobuf http://...`).
    pub destination: String,
    /// Spans and events dropped over the export's life, those of the last try included.
    pub dropped: u64,
    /// Why the last export failed (or did not finish), if it did.
    pub reason: Option<String>,
    /// The exit's bound passed before the last try ended: what it held is lost too.
    pub unfinished: bool,
    /// How long the exit waited for the export.
    pub waited: Duration,
}

impl ExitReport {
    /// Whether everything went out.
    pub fn complete(&self) -> bool {
        self.dropped == 0 && self.reason.is_none()
    }
}

impl std::fmt::Display for ExitReport {
    /// One line: `otlp http/protobuf http://127.0.0.1:9: not exported: 3 span(s) or event(s) (HTTP
    /// export failed: network error); waited 12 ms at exit`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.destination)?;
        if self.dropped > 0 {
            write!(f, "not exported: {} span(s) or event(s)", self.dropped)?;
        } else {
            f.write_str("the last export failed")?;
        }
        if let Some(reason) = &self.reason {
            write!(f, " ({reason})")?;
        }
        write!(f, "; waited {} ms at exit", self.waited.as_millis())
    }
}

/// The OTLP exporters, by protocol.
mod exporters {
    use std::time::Duration;

    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig as _};

    use super::{OtelConfig, OtelError, Protocol, RetryPolicy};

    fn unavailable(config: &OtelConfig, reason: String) -> OtelError {
        OtelError::Exporter {
            protocol: match config.protocol {
                Protocol::HttpProtobuf => "http/protobuf",
                Protocol::Grpc => "grpc",
            },
            endpoint: config.endpoint.clone().unwrap_or_default(),
            reason,
        }
    }

    /// The span exporter `config` asks for.
    pub(crate) fn spans(
        config: &OtelConfig,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> Result<opentelemetry_otlp::SpanExporter, OtelError> {
        let built = match config.protocol {
            #[cfg(feature = "http")]
            Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.signal_endpoint("v1/traces"))
                .with_timeout(timeout)
                .with_headers(Default::default())
                .with_retry_policy(retry)
                .build(),
            #[cfg(feature = "grpc")]
            Protocol::Grpc => opentelemetry_otlp::WithTonicConfig::with_retry_policy(
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(config.signal_endpoint(""))
                    .with_timeout(timeout),
                retry,
            )
            .build(),
            #[allow(unreachable_patterns)]
            _ => return Err(unavailable(config, "rho was built without it".into())),
        };
        built.map_err(|e| unavailable(config, e.to_string()))
    }

    /// The metric exporter `config` asks for.
    pub(crate) fn metrics(
        config: &OtelConfig,
        timeout: Duration,
    ) -> Result<opentelemetry_otlp::MetricExporter, OtelError> {
        let built = match config.protocol {
            #[cfg(feature = "http")]
            Protocol::HttpProtobuf => opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.signal_endpoint("v1/metrics"))
                .with_timeout(timeout)
                .with_retry_policy(RetryPolicy::disabled())
                .build(),
            #[cfg(feature = "grpc")]
            Protocol::Grpc => opentelemetry_otlp::WithTonicConfig::with_retry_policy(
                opentelemetry_otlp::MetricExporter::builder()
                    .with_tonic()
                    .with_endpoint(config.signal_endpoint(""))
                    .with_timeout(timeout),
                RetryPolicy::disabled(),
            )
            .build(),
            #[allow(unreachable_patterns)]
            _ => return Err(unavailable(config, "rho was built without it".into())),
        };
        built.map_err(|e| unavailable(config, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_environment_switches_it_on_and_disabled_wins() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let config = OtelConfig::default().with_vars(vars(&[])).unwrap();
        assert!(!config.enabled());
        let config = OtelConfig::default()
            .with_vars(vars(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_SERVICE_NAME", "agent"),
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=test, team=tools",
                ),
            ]))
            .unwrap();
        assert!(config.enabled());
        assert_eq!(config.protocol, Protocol::Grpc);
        assert_eq!(config.service_name, "agent");
        assert_eq!(config.resource_attributes.len(), 2);
        let config = config
            .with_vars(vars(&[("OTEL_SDK_DISABLED", "TRUE")]))
            .unwrap();
        assert!(!config.enabled());
        let bad =
            OtelConfig::default().with_vars(vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]));
        assert!(bad.unwrap_err().to_string().contains("http/json"));
        // The configuration's endpoint wins over the environment's.
        let config = OtelConfig {
            endpoint: Some("http://collector:4318".into()),
            ..OtelConfig::default()
        }
        .with_vars(vars(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://other:4318",
        )]))
        .unwrap();
        assert_eq!(
            config.signal_endpoint("v1/traces"),
            "http://collector:4318/v1/traces"
        );
    }
}
