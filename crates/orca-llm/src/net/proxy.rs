//! The proxy settings of model requests (ADR 0025): `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
//! `NO_PROXY`, read once through the caller's lookup; credentials are used, never displayed.

use super::{NetError, error_chain};

/// A proxy URL as given; its `Display` and `Debug` hide any credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl {
    var: String,
    raw: String,
}

impl ProxyUrl {
    /// The URL with `user:password@` replaced by `***@`.
    #[must_use]
    pub fn masked(&self) -> String {
        mask_userinfo(&self.raw)
    }

    /// The variable it came from.
    #[must_use]
    pub fn var(&self) -> &str {
        &self.var
    }
}

impl std::fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.var, self.masked())
    }
}

impl std::fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.masked())
    }
}

/// `scheme://user:pass@host` → `scheme://***@host`.
#[must_use]
pub fn mask_userinfo(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let prefix = if scheme.is_empty() {
                String::new()
            } else {
                format!("{scheme}://")
            };
            format!("{prefix}***@{}", &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

/// The proxy settings, from the standard variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proxies {
    https: Option<ProxyUrl>,
    http: Option<ProxyUrl>,
    all: Option<ProxyUrl>,
    no_proxy: Option<String>,
}

impl Proxies {
    /// Reads `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY` (each upper case first, then
    /// lower case; empty values are unset) through `env`. As curl and hyper do, `HTTP_PROXY` is
    /// ignored when `REQUEST_METHOD` is set (a CGI environment, where a client can set it).
    ///
    /// # Errors
    ///
    /// A value that is not a proxy URL (the error names the variable, never the value).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, NetError> {
        let get = |names: &[&str]| -> Result<Option<ProxyUrl>, NetError> {
            for name in names {
                if let Some(v) = env(name).filter(|v| !v.trim().is_empty()) {
                    let url = ProxyUrl {
                        var: (*name).to_owned(),
                        raw: v.trim().to_owned(),
                    };
                    reqwest::Proxy::all(url.raw.as_str()).map_err(|e| NetError::Proxy {
                        var: (*name).to_owned(),
                        message: mask_userinfo(&error_chain(&e)),
                    })?;
                    return Ok(Some(url));
                }
            }
            Ok(None)
        };
        let cgi = env("REQUEST_METHOD").is_some();
        Ok(Self {
            https: get(&["HTTPS_PROXY", "https_proxy"])?,
            http: if cgi {
                get(&["http_proxy"])?
            } else {
                get(&["HTTP_PROXY", "http_proxy"])?
            },
            all: get(&["ALL_PROXY", "all_proxy"])?,
            no_proxy: ["NO_PROXY", "no_proxy"]
                .iter()
                .find_map(|n| env(n))
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty()),
        })
    }

    /// The credentials in the proxy URLs (user-info and password), for the redactor of
    /// everything printed.
    #[must_use]
    pub fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in [&self.https, &self.http, &self.all].into_iter().flatten() {
            let rest = p.raw.split_once("://").map_or(p.raw.as_str(), |(_, r)| r);
            let authority = rest.split('/').next().unwrap_or_default();
            if let Some((userinfo, _)) = authority.rsplit_once('@') {
                out.push(userinfo.to_owned());
                if let Some((_, password)) = userinfo.split_once(':')
                    && !password.is_empty()
                {
                    out.push(password.to_owned());
                }
            }
        }
        out
    }

    /// Whether any proxy is set.
    #[must_use]
    pub const fn any(&self) -> bool {
        self.https.is_some() || self.http.is_some() || self.all.is_some()
    }

    /// The proxy a request to `url` goes through (`None`: direct), as reqwest decides it.
    #[must_use]
    pub fn for_url(&self, url: &str) -> Option<&ProxyUrl> {
        let https = url.starts_with("https://");
        let host = url
            .split_once("://")
            .map_or(url, |(_, rest)| rest)
            .split(['/', '?'])
            .next()
            .unwrap_or_default();
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        let host = if host.starts_with('[') {
            host.split(']')
                .next()
                .unwrap_or(host)
                .trim_start_matches('[')
        } else {
            host.rsplit_once(':').map_or(host, |(h, _)| h)
        };
        if self
            .no_proxy
            .as_deref()
            .is_some_and(|n| no_proxy_matches(n, host))
        {
            return None;
        }
        if https {
            self.https.as_ref().or(self.all.as_ref())
        } else {
            self.http.as_ref().or(self.all.as_ref())
        }
    }

    pub(super) fn reqwest_proxies(&self) -> Vec<reqwest::Proxy> {
        let no = || {
            self.no_proxy
                .as_deref()
                .and_then(reqwest::NoProxy::from_string)
        };
        let mut out = Vec::new();
        // Checked when read; a failure here cannot happen, and would only leave that one out.
        if let Some(p) = &self.https
            && let Ok(proxy) = reqwest::Proxy::https(p.raw.as_str())
        {
            out.push(proxy.no_proxy(no()));
        }
        if let Some(p) = &self.http
            && let Ok(proxy) = reqwest::Proxy::http(p.raw.as_str())
        {
            out.push(proxy.no_proxy(no()));
        }
        if let Some(p) = &self.all
            && let Ok(proxy) = reqwest::Proxy::all(p.raw.as_str())
        {
            out.push(proxy.no_proxy(no()));
        }
        out
    }

    /// One line for `orca doctor` (credentials masked).
    #[must_use]
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = [&self.https, &self.http, &self.all]
            .into_iter()
            .flatten()
            .map(|p| format!("{}={}", p.var, p.masked()))
            .collect();
        if parts.is_empty() {
            return "none (no HTTPS_PROXY, HTTP_PROXY or ALL_PROXY)".to_owned();
        }
        if let Some(n) = &self.no_proxy {
            parts.push(format!("NO_PROXY={n}"));
        }
        parts.join(", ")
    }
}

/// The `NO_PROXY` rule (as reqwest and curl apply it, for display): `*`, a host or domain suffix
/// (`example.com` and `.example.com` match `example.com` and its subdomains), an IP, or an
/// IP network (`10.0.0.0/8`).
#[must_use]
pub fn no_proxy_matches(no_proxy: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let ip: Option<std::net::IpAddr> = host.parse().ok();
    no_proxy
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            if let Some(ip) = ip {
                if let Some((net, bits)) = entry.split_once('/') {
                    return in_network(ip, net, bits);
                }
                return entry.parse::<std::net::IpAddr>().is_ok_and(|e| e == ip);
            }
            let domain = entry.trim_start_matches('.').to_ascii_lowercase();
            host == domain || host.ends_with(&format!(".{domain}"))
        })
}

fn in_network(ip: std::net::IpAddr, net: &str, bits: &str) -> bool {
    use std::net::IpAddr;
    let Ok(bits) = bits.parse::<u32>() else {
        return false;
    };
    match (ip, net.parse::<IpAddr>()) {
        (IpAddr::V4(a), Ok(IpAddr::V4(n))) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), Ok(IpAddr::V6(n))) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_masked() {
        assert_eq!(
            mask_userinfo("http://user:s3cret@proxy.corp:3128"),
            "http://***@proxy.corp:3128"
        );
        assert_eq!(
            mask_userinfo("http://proxy:3128/x@y"),
            "http://proxy:3128/x@y"
        );
        let env = |k: &str| (k == "HTTPS_PROXY").then(|| "http://u:pw@p:1".to_owned());
        let p = Proxies::from_env(&env).unwrap();
        assert!(!format!("{p:?} {}", p.describe()).contains("pw"));
        assert_eq!(p.secrets(), ["u:pw", "pw"]);
    }

    #[test]
    fn no_proxy_rules() {
        let rules = "example.com, .corp.internal,10.0.0.0/8, 127.0.0.1,::1";
        for (host, hit) in [
            ("example.com", true),
            ("api.example.com", true),
            ("notexample.com", false),
            ("x.corp.internal", true),
            ("corp.internal", true),
            ("10.2.3.4", true),
            ("11.2.3.4", false),
            ("127.0.0.1", true),
            ("::1", true),
            ("localhost", false),
        ] {
            assert_eq!(no_proxy_matches(rules, host), hit, "{host}");
        }
        assert!(no_proxy_matches("*", "anything"));
    }

    #[test]
    fn proxy_choice_by_scheme() {
        let env = |k: &str| match k {
            "https_proxy" => Some("http://tls-proxy:1".to_owned()),
            "ALL_PROXY" => Some("http://all:2".to_owned()),
            "NO_PROXY" => Some("local.test".to_owned()),
            _ => None,
        };
        let p = Proxies::from_env(&env).unwrap();
        assert_eq!(
            p.for_url("https://api.x/v1").map(ProxyUrl::masked),
            Some("http://tls-proxy:1".to_owned())
        );
        assert_eq!(
            p.for_url("http://api.x/v1").map(ProxyUrl::masked),
            Some("http://all:2".to_owned())
        );
        assert_eq!(p.for_url("https://a.local.test:8443/v1"), None);
        let bad = |k: &str| (k == "HTTP_PROXY").then(|| "http://[::1".to_owned());
        let e = Proxies::from_env(&bad).unwrap_err();
        assert!(e.to_string().contains("HTTP_PROXY"), "{e}");
    }
}
