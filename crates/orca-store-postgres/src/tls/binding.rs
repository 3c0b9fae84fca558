//! SCRAM channel binding (`tls-server-end-point`, RFC 5929): the hash of the server's
//! certificate, with the hash of its signature algorithm (SHA-256 for MD5 and SHA-1), as the
//! server computes it. With it, a password login over TLS is bound to this TLS session: a man
//! in the middle who terminates TLS cannot relay it (`channel_binding=require` in the URL makes
//! it mandatory; the default uses it when the server offers SCRAM-SHA-256-PLUS).

use sha2::Digest as _;

/// The hash for a signature algorithm OID (DER content bytes), if it is one we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
const ECDSA_SHA2: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03];
const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];

fn hash_of(oid: &[u8]) -> Option<Hash> {
    if oid == ECDSA_SHA1 {
        return Some(Hash::Sha256);
    }
    if let Some(last) = oid.strip_prefix(RSA) {
        return match last {
            // md5, sha1 → sha256 (RFC 5929 4.1); sha256, sha384, sha512
            [0x04 | 0x05 | 0x0b] => Some(Hash::Sha256),
            [0x0c] => Some(Hash::Sha384),
            [0x0d] => Some(Hash::Sha512),
            _ => None,
        };
    }
    match oid.strip_prefix(ECDSA_SHA2) {
        Some([0x02]) => Some(Hash::Sha256),
        Some([0x03]) => Some(Hash::Sha384),
        Some([0x04]) => Some(Hash::Sha512),
        _ => None,
    }
}

/// One DER element: (tag, content, the rest after it).
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The signature algorithm OID of a certificate: Certificate ::= SEQUENCE { tbsCertificate,
/// signatureAlgorithm SEQUENCE { OID, … }, signature }.
fn signature_oid(cert: &[u8]) -> Option<&[u8]> {
    let (0x30, body, _) = element(cert)? else {
        return None;
    };
    let (0x30, _, rest) = element(body)? else {
        return None;
    };
    let (0x30, algorithm, _) = element(rest)? else {
        return None;
    };
    let (0x06, oid, _) = element(algorithm)? else {
        return None;
    };
    Some(oid)
}

/// `tls-server-end-point` data for the server's certificate (DER), or `None` for a signature
/// algorithm without a defined hash (Ed25519, RSA-PSS): then the client does not bind.
pub(super) fn server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    Some(match hash_of(signature_oid(cert)?)? {
        Hash::Sha256 => sha2::Sha256::digest(cert).to_vec(),
        Hash::Sha384 => sha2::Sha384::digest(cert).to_vec(),
        Hash::Sha512 => sha2::Sha512::digest(cert).to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_algorithm_picks_the_hash() {
        assert_eq!(hash_of(&[RSA, &[0x0b]].concat()), Some(Hash::Sha256));
        assert_eq!(hash_of(&[RSA, &[0x05]].concat()), Some(Hash::Sha256));
        assert_eq!(hash_of(&[RSA, &[0x0d]].concat()), Some(Hash::Sha512));
        assert_eq!(hash_of(&[ECDSA_SHA2, &[0x03]].concat()), Some(Hash::Sha384));
        assert_eq!(hash_of(&[0x2b, 0x65, 0x70]), None, "ed25519");
        assert_eq!(hash_of(&[RSA, &[0x0a]].concat()), None, "rsa-pss");
    }

    #[test]
    fn malformed_certificates_give_no_binding() {
        for der in [
            &[][..],
            &[0x30],
            &[0x30, 0x85, 0, 0, 0, 0, 0],
            &[0x30, 0x03, 0x30, 0x01],
        ] {
            assert_eq!(server_end_point(der), None, "{der:?}");
        }
        // tbs, then an algorithm of ecdsa-with-SHA256, then a signature.
        let oid = [ECDSA_SHA2, &[0x02]].concat();
        let mut alg = vec![0x06, u8::try_from(oid.len()).unwrap()];
        alg.extend(&oid);
        let mut body = vec![0x30, 0x00, 0x30, u8::try_from(alg.len()).unwrap()];
        body.extend(&alg);
        body.extend([0x03, 0x01, 0x00]);
        let mut cert = vec![0x30, u8::try_from(body.len()).unwrap()];
        cert.extend(&body);
        assert_eq!(
            server_end_point(&cert),
            Some(sha2::Sha256::digest(&cert).to_vec())
        );
    }
}
