// What UCX 1.13 says only in text: its configuration (UCX_TLS) and ucp_ep_print_info's description of an endpoint. Pure
// functions over that text, so that the rules can be tested on canned lines.
#pragma once

#include <initializer_list>
#include <string>

namespace bagua {

// Whether a UCX_TLS value lets in at least one of `members` (transport names, e.g. "posix", "sysv"), where `aliases`
// are the names that select all of them (e.g. "sm"). UCX 1.13's rules: null or empty is every transport; a list
// names transports or aliases, "all" included; a leading '^' makes it a list to leave out (out goes a member named,
// or all of them through an alias); a '\' before a name means that name only, never an alias; ":aux" after a name
// selects it for connection set-up, which counts as letting it in.
bool ucx_tls_allows(const char* tls, std::initializer_list<const char*> members,
                    std::initializer_list<const char*> aliases = {});

// The value of `name` (e.g. "UCX_TLS") in ucp_config_print's "NAME=value" lines, which show a configuration as UCX
// will use it (the environment, else a ucx.conf file, else UCX's default); empty when no line names it.
std::string ucx_config_value(const std::string& config_text, const std::string& name);

// Whether the endpoints that ucp_ep_print_info's text describes may leave a completed send's bytes, or a protocol
// reply, queued until the worker is progressed again: true when a lane that carries messages (flags am, am_bw#N or
// tag_offload) runs over a transport other than shared memory or the GPU copies ("lane[0]:  0:tcp/lo.0 md[0] ->
// md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup"). Lanes for RDMA only (rma_bw#N, amo#N) move data that the
// receiver asked for, and connection-manager lanes ("lane[1]: cm rdmacm") none. A lane line that cannot be read
// counts as true, and so does text whose endpoints name no lane; text without an endpoint is false.
bool lanes_may_linger(const std::string& ep_info);

}  // namespace bagua
