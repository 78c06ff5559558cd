//! Exchange Online's message trace in Graph v1.0, fed by what graph-sim delivered: one
//! [`TraceRecord`] per recipient of every accepted message, visible `trace.lag_ms` after the
//! send, served by `GET /v1.0/admin/exchange/tracing/messageTraces` ([`routes`]) with the
//! `$filter` operators Microsoft documents ([`filter`]), `$top` and `@odata.nextLink` paging, and
//! by `getDetailsByRecipient`.
//!
//! | behaviour | Microsoft |
//! |---|---|
//! | fields `id`, `messageId`, `receivedDateTime`, `recipientAddress`, `senderAddress`, `status`, `subject`, `size`, `fromIP`, `toIP` | <https://learn.microsoft.com/graph/api/resources/exchangemessagetrace> |
//! | `$top` 1–5000, default 1000; `@odata.nextLink` carries the query | <https://learn.microsoft.com/graph/api/messagetracingroot-list-messagetraces> |
//! | detail events `event`, `action`, `description`, `dateTime`, `data` | <https://learn.microsoft.com/graph/api/resources/exchangemessagetracedetail>, <https://learn.microsoft.com/graph/api/exchangemessagetrace-getdetailsbyrecipient> |
//! | application permission `ExchangeMessageTrace.Read.All` | both pages' Permissions tables |
//! | 100 requests per tenant per rolling 5 minutes, list and detail sharing them | <https://learn.microsoft.com/powershell/module/exchange/get-messagetracedetailv2> |
//! | `401` until the tenant created the service principal of app `8bd644d1-64a1-4d4b-ae52-2e0cbf64e373` | <https://learn.microsoft.com/exchange/monitoring/trace-an-email-message/graph-api-message-trace> |
//! | 90 days of history, at most 10 days per query, 48 h when no dates are given | <https://learn.microsoft.com/powershell/module/exchange/get-messagetracev2> |

pub(crate) mod filter;
pub(crate) mod routes;

/// The message-trace app whose service principal a tenant creates before its first call.
pub const MESSAGE_TRACE_APP_ID: &str = "8bd644d1-64a1-4d4b-ae52-2e0cbf64e373";

pub use crate::trace_log::{TraceRecord, TraceStats};
