//! AdmissionReviews in and out: [`wire`] (the request as it arrives), [`subject`] (its object,
//! decoded), [`respond`] (judged and answered), [`unchanged`] (UPDATEs that change nothing read).

pub mod respond;
pub mod subject;
pub mod unchanged;
pub mod wire;

pub use respond::{
    AdmissionDecision, Outcome, Webhook, fit_warnings, into_review, line, review, review_json, review_with_progress,
};
pub use subject::subject;
pub use wire::{BadRequest, MAX_JSON_VALUES, Request, count_values, parse, parse_counted, value_bound};
