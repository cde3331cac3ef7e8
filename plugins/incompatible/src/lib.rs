//! A test fixture: exports a root module under rho's name and interface version but with another
//! layout, as a plugin built against an incompatible `rho-plugin-api` would. Hosts must refuse it
//! with one line (`AbiInstability`), not crash.

use abi_stable::{
    declare_root_module_statics, export_root_module, library::RootModule, package_version_strings,
    prefix_type::PrefixTypeTrait, sabi_types::VersionStrings, std_types::RString, StableAbi,
};

/// The root module, laid out differently from rho's.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// A 64-bit field where rho has a 32-bit one.
    pub interface_version: u64,
    /// Returns a plain string where rho returns a result.
    #[sabi(last_prefix_field)]
    pub describe: extern "C" fn() -> RString,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "rho_plugin";
    const NAME: &'static str = "rho_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

extern "C" fn describe() -> RString {
    RString::from("incompatible")
}

/// Exports the mismatched root module.
#[export_root_module]
pub fn get_library() -> PluginModRef {
    PluginMod {
        interface_version: 1,
        describe,
    }
    .leak_into_prefix()
}
