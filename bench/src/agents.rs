//! The bench's agents over HTTP: a pooled client and the two ways of reporting a claimed batch
//! (one `POST /v1/completions`, or one concurrent complete request per instance).

use anyhow::Result;
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// An HTTP client for the bench's agents, keeping up to `idle` connections per server.
pub fn agent_client(idle: usize) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(idle.max(64))
        .build()?)
}

/// Report a claimed batch in one `POST /v1/completions`: (accepted, refused) items.
pub async fn complete_batch(
    client: &reqwest::Client,
    url: &str,
    items: &[Value],
) -> Result<(u64, u64)> {
    let completions: Vec<Value> = items
        .iter()
        .map(|i| json!({"id": i["id"], "lease_token": i["lease_token"]}))
        .collect();
    let r: Value = client
        .post(format!("{url}/v1/completions"))
        .json(&json!({"completions": completions}))
        .send()
        .await?
        .json()
        .await?;
    let ok = r["results"]
        .as_array()
        .map(|a| a.iter().filter(|x| x["status"] == 200).count() as u64)
        .unwrap_or(0);
    Ok((ok, items.len() as u64 - ok.min(items.len() as u64)))
}

/// Complete every claimed instance with its own request, all in flight at once:
/// (accepted, refused) requests.
pub async fn complete_each(
    client: &reqwest::Client,
    url: &str,
    items: Vec<Value>,
) -> Result<(u64, u64)> {
    let mut set = JoinSet::new();
    for i in items {
        let (client, url) = (client.clone(), url.to_owned());
        set.spawn(async move {
            let id = i["id"].as_str().unwrap_or("").to_owned();
            let r = client
                .post(format!("{url}/v1/instances/{id}/complete"))
                .json(&json!({"lease_token": i["lease_token"]}))
                .send()
                .await?;
            Ok::<bool, anyhow::Error>(r.status().is_success())
        });
    }
    let (mut ok, mut refused) = (0, 0);
    while let Some(r) = set.join_next().await {
        if r?? {
            ok += 1;
        } else {
            refused += 1;
        }
    }
    Ok((ok, refused))
}
