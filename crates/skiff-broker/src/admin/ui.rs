//! `GET /ui/clients` and `GET /ui/clients/{id}`: the client-instance page, one static HTML
//! document with its CSS and script inline (`clients.html`, no build step, nothing loaded from
//! anywhere else). The script reads the JSON endpoints (`/clients`, `/clients/{id}`,
//! `/clients/{id}/events`, `/health`) and polls them; it builds the page element by element, so
//! whatever a client sent (IDs, names, versions) only ever becomes text.
//!
//! The answer carries a Content-Security-Policy that lets only this page's own script and style
//! run (by their SHA-256) and lets it fetch from this listener alone: markup slipped into the
//! page some other way could not run a script or send anything elsewhere.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{Html, IntoResponse};
use base64::Engine as _;

/// The page.
const PAGE: &str = include_str!("clients.html");

/// The policy the page is served with (see the module documentation).
static POLICY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; \
         img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        inline_hash(PAGE, "script"),
        inline_hash(PAGE, "style"),
    )
});

/// `'sha256-…'` of the body of the page's one `<tag>` element, as CSP wants it (`'none'` when
/// there is no such element, which would be a broken page: its tests catch it).
fn inline_hash(page: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let body = page
        .split_once(&open)
        .and_then(|(_, rest)| rest.split_once(&close))
        .map(|(body, _)| body);
    match body {
        Some(body) => {
            let digest = ring::digest::digest(&ring::digest::SHA256, body.as_bytes());
            format!(
                "'sha256-{}'",
                base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
            )
        }
        None => "'none'".to_string(),
    }
}

/// The page, for the list (`/ui/clients`) and for one instance (`/ui/clients/{id}`: the
/// script reads the ID from the path).
pub(super) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_SECURITY_POLICY, POLICY.as_str()),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Html(PAGE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        // No external scripts, styles, images or links: the one URL in it is SVG's namespace.
        let without_namespace = PAGE.replace("\"http://www.w3.org/2000/svg\"", "");
        for needle in [
            "http://", "https://", "//cdn", "src=", "@import", "url(", "<link",
        ] {
            assert!(
                !without_namespace.contains(needle),
                "the page holds {needle:?}"
            );
        }
        assert_eq!(PAGE.matches("<script>").count(), 1);
        assert_eq!(PAGE.matches("<style>").count(), 1);
    }

    #[test]
    fn client_text_never_becomes_markup() {
        // The script builds elements and text nodes; it never parses strings as HTML.
        for needle in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "DOMParser",
            "createContextualFragment",
        ] {
            assert!(!PAGE.contains(needle), "the page uses {needle}");
        }
        assert!(PAGE.contains("document.createTextNode(String(child))"));
    }

    #[test]
    fn the_policy_admits_only_the_page_s_own_script_and_style() {
        let policy = POLICY.as_str();
        assert!(
            policy.starts_with("default-src 'none'; script-src 'sha256-"),
            "{policy}"
        );
        assert!(policy.contains("style-src 'sha256-"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        // The hash is of the element's body exactly.
        let digest = ring::digest::digest(&ring::digest::SHA256, b"x");
        let expected = format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
        );
        assert_eq!(inline_hash("<p><script>x</script>", "script"), expected);
        assert_eq!(inline_hash("<p>", "script"), "'none'");
    }
}
