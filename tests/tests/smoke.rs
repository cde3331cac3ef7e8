#[test]
fn builds_artifacts() {
    assert!(rho_tests::plugin_lib("echo").exists());
}
