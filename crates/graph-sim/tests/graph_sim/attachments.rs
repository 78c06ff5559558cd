//! A draft's attachments as Graph takes them: a `POST …/attachments` under 3 MB, capped at
//! 4 MB a request (`413`); upload sessions from 3 MB only (`400
//! ErrorAttachmentSizeShouldNotBeLessThanMinimumSize`), on another origin, without
//! `Authorization`; `DELETE` moves a draft out of Drafts; 150 MB of uploads per 5 minutes per
//! app and mailbox (`429 ApplicationThrottled` "IncomingBytes").

use super::*;
use graph_sim::{
    drafts::{MAX_CHUNK_BYTES, MAX_UPLOAD_BYTES, MIN_UPLOAD_BYTES},
    limits::UPLOAD_BYTES_PER_5_MINUTES,
};

const MB: usize = 1024 * 1024;

/// A started sim, a client, a token and a fresh draft's id in `MAILBOX`.
async fn with_draft() -> (GraphSim, ManualClock, Client, String, String, String) {
    let (sim, clock) = start().await;
    let http = Client::new();
    let bearer = token(&http, &sim).await;
    let base = format!("{}/users/{MAILBOX}", sim.graph_base_url());
    let draft: Value = json_of(
        http.post(format!("{base}/messages"))
            .bearer_auth(&bearer)
            .json(&json!({"subject": "Hi", "toRecipients": recipients(1)})),
    )
    .await;
    let id = draft["id"].as_str().unwrap().to_owned();
    (sim, clock, http, bearer, base, id)
}

fn file_attachment(name: &str, size: usize) -> Value {
    use base64::Engine as _;
    json!({"@odata.type": "#microsoft.graph.fileAttachment", "name": name,
        "contentType": "application/pdf",
        "contentBytes": base64::engine::general_purpose::STANDARD.encode(vec![7u8; size])})
}

fn session_request(size: usize) -> Value {
    json!({"AttachmentItem": {"attachmentType": "file", "name": "big.pdf", "size": size}})
}

async fn error_code(answer: Response) -> (StatusCode, String) {
    let status = answer.status();
    let body: Value = answer.json().await.unwrap();
    (
        status,
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test]
async fn a_small_attachment_is_posted_and_one_request_over_4_mb_is_refused_413() {
    let (sim, _clock, http, bearer, base, id) = with_draft().await;
    let post = |body: Value| {
        http.post(format!("{base}/messages/{id}/attachments"))
            .bearer_auth(&bearer)
            .json(&body)
            .send()
    };
    let created = post(file_attachment("one.pdf", MB)).await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    // Under 3 MB, but 4,194,304 bytes of base64 plus its JSON: over Graph's 4 MB.
    let too_big = post(file_attachment("edge.pdf", MIN_UPLOAD_BYTES as usize - 1))
        .await
        .unwrap();
    assert_eq!(
        error_code(too_big).await,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge".to_owned()
        )
    );
    let sent = http
        .post(format!("{base}/messages/{id}/send"))
        .bearer_auth(&bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::ACCEPTED);
    let delivered = sim.messages();
    assert_eq!(delivered[0].attachments.len(), 1);
    assert_eq!(delivered[0].attachments[0].bytes, MB);
    assert_eq!(sim.drafts()[0].posted_attachments, 1);
}

#[tokio::test]
async fn an_upload_session_under_3_mb_is_refused_and_its_url_is_another_origin_without_authorization()
 {
    let (sim, _clock, http, bearer, base, id) = with_draft().await;
    let open = |size: usize| {
        http.post(format!(
            "{base}/messages/{id}/attachments/createUploadSession"
        ))
        .bearer_auth(&bearer)
        .json(&session_request(size))
        .send()
    };
    for size in [10, MIN_UPLOAD_BYTES as usize - 1] {
        assert_eq!(
            error_code(open(size).await.unwrap()).await,
            (
                StatusCode::BAD_REQUEST,
                "ErrorAttachmentSizeShouldNotBeLessThanMinimumSize".to_owned()
            ),
            "{size} bytes"
        );
    }
    assert_eq!(
        error_code(open(MAX_UPLOAD_BYTES as usize + 1).await.unwrap())
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    let size = MIN_UPLOAD_BYTES as usize;
    let session: Value = open(size).await.unwrap().json().await.unwrap();
    let url = reqwest::Url::parse(session["uploadUrl"].as_str().unwrap()).unwrap();
    assert_eq!(url.origin(), sim.upload_origin().origin());
    assert_ne!(
        url.origin(),
        sim.graph_base_url().origin(),
        "another origin"
    );
    // The API's origin does not serve upload URLs.
    let mut on_api = sim.graph_base_url();
    on_api.set_path(url.path());
    let wrong = http.put(on_api).body(vec![0u8; 5]).send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::BAD_REQUEST);
    let half = size / 2;
    let first = format!("bytes 0-{}/{size}", half - 1);
    let second = format!("bytes {half}-{}/{size}", size - 1);
    let put = |range: String, auth: bool| {
        let mut r = http
            .put(url.clone())
            .header("Content-Range", range)
            .body(vec![1u8; half]);
        if auth {
            r = r.bearer_auth(&bearer);
        }
        r.send()
    };
    // With a bearer token, out of order, the first half, the second half.
    for (range, auth, status) in [
        (first.clone(), true, StatusCode::UNAUTHORIZED),
        (second.clone(), false, StatusCode::RANGE_NOT_SATISFIABLE),
        (first, false, StatusCode::OK),
        (second, false, StatusCode::CREATED),
    ] {
        let answer = put(range.clone(), auth).await.unwrap();
        assert_eq!(answer.status(), status, "{range} with auth {auth}");
    }
    assert_eq!(sim.drafts()[0].uploaded_attachments, 1);
}

#[tokio::test]
async fn a_deleted_draft_leaves_drafts_and_is_still_found_by_id() {
    let (sim, _clock, http, bearer, base, id) = with_draft().await;
    let deleted = http
        .delete(format!("{base}/messages/{id}"))
        .bearer_auth(&bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let drafts: Value = json_of(
        http.get(format!("{base}/mailFolders/drafts/messages"))
            .bearer_auth(&bearer),
    )
    .await;
    assert_eq!(drafts["value"].as_array().unwrap().len(), 0);
    let by_id = http
        .get(format!("{base}/messages/{id}"))
        .bearer_auth(&bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(by_id.status(), StatusCode::OK, "in Deleted Items");
    assert!(sim.drafts()[0].deleted);
}

#[tokio::test]
async fn uploads_past_150_mb_in_5_minutes_are_throttled_until_the_first_bytes_age_out() {
    let (_sim, clock, http, bearer, base, id) = with_draft().await;
    let size = MAX_UPLOAD_BYTES as usize;
    let session: Value = json_of(
        http.post(format!(
            "{base}/messages/{id}/attachments/createUploadSession"
        ))
        .bearer_auth(&bearer)
        .json(&session_request(size)),
    )
    .await;
    let url = session["uploadUrl"].as_str().unwrap().to_owned();
    let chunk = vec![3u8; MAX_CHUNK_BYTES];
    let put = |start: usize| {
        let end = (start + MAX_CHUNK_BYTES).min(size);
        http.put(&url)
            .header("Content-Range", format!("bytes {start}-{}/{size}", end - 1))
            .body(chunk[..end - start].to_vec())
            .send()
    };
    let mut start = 0;
    while start + MAX_CHUNK_BYTES < size {
        assert_eq!(
            put(start).await.unwrap().status(),
            StatusCode::OK,
            "{start}"
        );
        start += MAX_CHUNK_BYTES;
    }
    // The draft's and the session's JSON were uploaded bytes too: the last chunk is over 150 MB.
    assert_eq!(UPLOAD_BYTES_PER_5_MINUTES as usize, size);
    let refused = put(start).await.unwrap();
    assert_eq!(retry_after(&refused).as_deref(), Some("300"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        (
            body["error"]["code"].as_str(),
            body["error"]["message"].as_str()
        ),
        (
            Some("ApplicationThrottled"),
            Some("Application is over its IncomingBytes limit.")
        )
    );
    clock.advance(Duration::from_secs(300));
    assert_eq!(put(start).await.unwrap().status(), StatusCode::CREATED);
}
