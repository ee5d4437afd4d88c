//! Against a bundle sigstore-python 4.5.1 made (`sigstore sign`) with the
//! tests' private instance (tests/peers/sigstore_instance.py): Fulcio's
//! certificate with an embedded SCT, Rekor's entry third in a tree of three.

use super::*;

const ARTIFACT: &[u8] = include_bytes!("testdata/artifact.txt");
const BUNDLE: &str = include_str!("testdata/artifact.txt.sigstore.json");
const ROOT: &str = include_str!("testdata/trusted_root.json");

fn bundle() -> Bundle {
    Bundle::from_json(BUNDLE.as_bytes()).unwrap()
}

fn root() -> TrustedRoot {
    TrustedRoot::from_json(ROOT).unwrap()
}

#[test]
fn a_bundle_sigstore_python_made_verifies_with_its_identity_and_log_time() {
    let v = verify(&bundle(), ARTIFACT, &root()).unwrap();
    assert_eq!(
        v.signer,
        Signer::Identity { identity: "alice@example.org".into(), issuer: "https://accounts.example.org".into() }
    );
    assert_eq!(v.log_index, 2);
    assert_eq!(v.logged_at, 1_796_007_069);
    // It reads back as it was written.
    assert_eq!(Bundle::from_json(bundle().to_json().as_bytes()).unwrap(), bundle());
}

#[test]
fn another_artifact_is_refused() {
    let e = verify(&bundle(), b"hello!\n", &root()).unwrap_err();
    assert!(matches!(e, SigstoreError::Log(ref m) if m.contains("the artifact's is")), "{e}");
}

#[test]
fn another_trusted_root_refuses_it() {
    let e = verify(&bundle(), ARTIFACT, &TrustedRoot::public_good()).unwrap_err();
    assert!(matches!(e, SigstoreError::Log(ref m) if m.contains("not in the trusted root")), "{e}");
}

#[test]
fn a_changed_signature_time_proof_or_certificate_is_refused() {
    // The integrated time, which the signed entry timestamp covers.
    let mut b = bundle();
    b.verification_material.tlog_entries[0].integrated_time += 1;
    assert!(
        matches!(verify(&b, ARTIFACT, &root()), Err(SigstoreError::Log(m)) if m.contains("signed entry timestamp"))
    );
    // The inclusion proof's root.
    let mut b = bundle();
    b.verification_material.tlog_entries[0].inclusion_proof.as_mut().unwrap().root_hash[0] ^= 1;
    assert!(matches!(verify(&b, ARTIFACT, &root()), Err(SigstoreError::Log(m)) if m.contains("root hash")));
    // The signature.
    let mut b = bundle();
    let sig = &mut b.message_signature.as_mut().unwrap().signature;
    let last = sig.len() - 1;
    sig[last] ^= 1;
    assert!(verify(&b, ARTIFACT, &root()).is_err());
    // A certificate byte.
    let mut b = bundle();
    let cert = &mut b.verification_material.certificate.as_mut().unwrap().raw_bytes;
    let last = cert.len() - 1;
    cert[last] ^= 1;
    assert!(matches!(verify(&b, ARTIFACT, &root()), Err(SigstoreError::Log(m)) if m.contains("another certificate")));
}

#[test]
fn a_root_without_the_ct_log_refuses_the_certificate_by_its_sct() {
    let mut root = root();
    root.ctlogs.clear();
    let e = verify(&bundle(), ARTIFACT, &root).unwrap_err();
    assert!(matches!(e, SigstoreError::Certificate(ref m) if m.contains("SCT")), "{e}");
}

#[test]
fn a_root_whose_authority_ended_before_the_log_time_refuses_it() {
    let mut root = root();
    root.authorities[0].end = Some(1_796_007_069 - 1);
    let e = verify(&bundle(), ARTIFACT, &root).unwrap_err();
    assert!(matches!(e, SigstoreError::Certificate(ref m) if m.contains("no certificate authority")), "{e}");
}

#[test]
fn the_public_good_root_parses_and_malformed_input_says_what() {
    let pg = TrustedRoot::public_good();
    assert!(!pg.tlogs.is_empty() && !pg.ctlogs.is_empty() && !pg.authorities.is_empty());
    assert!(matches!(Bundle::from_json(b"{}"), Err(SigstoreError::Malformed(_))));
    assert!(matches!(
        Bundle::from_json(br#"{"mediaType":"text/plain","verificationMaterial":{}}"#),
        Err(SigstoreError::Malformed(m)) if m.contains("not a Sigstore bundle")
    ));
    assert!(matches!(TrustedRoot::from_json("[]"), Err(SigstoreError::Root(_))));
}

#[test]
fn a_root_with_a_log_id_that_is_not_a_sha256_is_refused_not_a_panic() {
    let mut v: serde_json::Value = serde_json::from_str(ROOT).unwrap();
    v["tlogs"][0]["logId"]["keyId"] = "AAE=".into();
    let e = TrustedRoot::from_json(&v.to_string()).unwrap_err();
    assert!(matches!(e, SigstoreError::Root(ref m) if m.contains("tlogs[0].logId.keyId is 2 bytes")), "{e}");
}

#[test]
fn a_ct_log_key_not_valid_when_it_signed_the_sct_refuses_the_certificate() {
    for (start, end) in [(Some(2_000_000_000), None), (None, Some(1_600_000_000))] {
        let mut root = root();
        if let Some(s) = start {
            root.ctlogs[0].start = s;
        }
        root.ctlogs[0].end = end;
        let e = verify(&bundle(), ARTIFACT, &root).unwrap_err();
        assert!(matches!(e, SigstoreError::Certificate(ref m) if m.contains("SCT")), "{e}");
    }
}

#[test]
fn a_certificate_names_its_signer_before_any_verification() {
    let leaf = bundle().verification_material.certificate.unwrap().raw_bytes;
    assert_eq!(
        certificate_signer(&leaf),
        Some(Signer::Identity { identity: "alice@example.org".into(), issuer: "https://accounts.example.org".into() })
    );
    assert_eq!(certificate_signer(b"not a certificate"), None);
}
