//! The client side of a server's connection ([`Handler`]): questions to the calls they belong
//! to, list changes to the supervisor, a remote server's progress and log lines (a stdio server's
//! are read on the way in: `super::stdout`).

use std::sync::Arc;

use rho_runtime::{Question, Reply};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient};

use super::shared::Shared;

/// The client side of the connection: log lines and questions to the calls they belong to, list
/// changes to the supervisor (a stdio server's progress and log lines are read on the way in:
/// `super::stdout`; a remote server's come here).
#[derive(Clone)]
pub(crate) struct Handler {
    pub shared: Arc<Shared>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(Default::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("rho", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if self.shared.remote {
            self.shared.progress(&params);
        }
    }

    #[allow(deprecated)] // MCP logging: see `crate::convert::logs`.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if self.shared.remote {
            let (level, text) = crate::convert::logs::line_of(params);
            self.shared.log(level, &text);
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.shared.relist.notify_one();
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return Ok(declined());
        };
        let Some(ctx) = self.shared.current() else {
            return Ok(declined());
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
        let (action, content) = match ctx.ask(Question::new(message, schema)).await {
            Reply::Accepted(answer) => (ElicitationAction::Accept, Some(answer)),
            Reply::Declined(_) => (ElicitationAction::Decline, None),
            Reply::Cancelled(_) => (ElicitationAction::Cancel, None),
        };
        let mut result = declined();
        result.action = action;
        result.content = content;
        Ok(result)
    }
}

fn declined() -> ElicitResult {
    ElicitResult::new(ElicitationAction::Decline)
}
