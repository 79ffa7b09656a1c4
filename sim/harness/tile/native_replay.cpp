// The native replay of a co-simulation (sim/harness/tile/native.py): the Verilated top of a
// `tricut tile run --sim verilator` build, linked with this main instead of cocotb's, plays a
// stimulus file recorded from a cocotb run (sim/harness/tile/stimulus.py) -- every input write
// at the half clock period it happened, the HBM image by $readmemh from +hbm_image= as in the
// cocotb run -- and checks every value the bench read at the half period it read it. No Python
// and no VPI callbacks in the loop: Verilator's evaluation alone, two evals per clock cycle
// (plus one after a half period's writes).
//
// Usage: <exe> <stimulus file> +hbm_image=<hex file>
// Prints one JSON line: cycles, the loop's wall time, the start-up's, and the checks; exits 1
// on the first check that differs (naming the signal, the half period and both values).

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"

static uint64_t main_time = 0;
double sc_time_stamp() { return static_cast<double>(main_time); }

namespace {

struct Handle {
    std::string path;
    long index;
    vpiHandle h;
};

struct Event {
    uint64_t half;   // half clock periods since time 0 (even: clock high, a rising edge)
    bool check;      // a value the bench read (else a write)
    size_t handle;
    std::string hex;
};

[[noreturn]] void fail(const std::string &msg) {
    std::fprintf(stderr, "native replay: %s\n", msg.c_str());
    std::exit(2);
}

vpiHandle resolve(const std::string &path, long index) {
    vpiHandle h = vpi_handle_by_name(const_cast<PLI_BYTE8 *>(path.c_str()), nullptr);
    if (!h) fail("no signal " + path + " in the Verilated top");
    if (index >= 0) {
        vpiHandle e = vpi_handle_by_index(h, static_cast<PLI_INT32>(index));
        if (!e) fail("no element " + std::to_string(index) + " of " + path);
        return e;
    }
    return h;
}

// a hex string without leading zeros ("0" for zero), lower case
std::string canonical(const char *s) {
    while (*s == '0' && s[1]) ++s;
    std::string out(s);
    for (auto &c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) fail("usage: <exe> <stimulus file> +hbm_image=<hex file> [--keep-going]");
    bool keep_going = false;
    for (int i = 2; i < argc; ++i)
        if (std::string(argv[i]) == "--keep-going") keep_going = true;
    auto t_start = std::chrono::steady_clock::now();
    std::ifstream in(argv[1]);
    if (!in) fail(std::string("cannot read ") + argv[1]);
    std::vector<Handle> handles;
    std::vector<Event> events;
    uint64_t end = 0;
    std::string line, kind;
    if (!std::getline(in, line) || line != "tricut-stimulus 1")
        fail(std::string(argv[1]) + " is not a tricut stimulus file (version 1)");
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        ls >> kind;
        if (kind == "handle") {
            size_t id;
            Handle h{"", -1, nullptr};
            ls >> id >> h.path >> h.index;
            if (id != handles.size()) fail("handles out of order in " + line);
            handles.push_back(h);
        } else if (kind == "w" || kind == "c") {
            Event e;
            e.check = kind == "c";
            ls >> e.half >> e.handle >> e.hex;
            if (e.handle >= handles.size()) fail("unknown handle in " + line);
            events.push_back(e);
        } else if (kind == "end") {
            ls >> end;
        } else if (!kind.empty()) {
            fail("unknown record: " + line);
        }
    }
    for (size_t i = 1; i < events.size(); ++i)
        if (events[i].half < events[i - 1].half) fail("events out of time order");

    const std::unique_ptr<VerilatedContext> ctx{new VerilatedContext};
    ctx->commandArgs(argc, argv);
    ctx->fatalOnVpiError(true);
    const std::unique_ptr<Vtop> top{new Vtop{ctx.get(), ""}};
    for (auto &h : handles) h.h = resolve(h.path, h.index);

    size_t next = 0, writes = 0, checks = 0, mismatches = 0;
    s_vpi_value v;
    // a half period: its writes, one evaluation, then its checks (every value the bench read
    // in it, which never depends on an input the bench wrote after the read)
    auto play = [&](uint64_t half) {
        size_t first = next;
        bool wrote = false;
        for (; next < events.size() && events[next].half == half; ++next) {
            const Event &e = events[next];
            if (e.check) continue;
            v.format = vpiHexStrVal;
            v.value.str = const_cast<PLI_BYTE8 *>(e.hex.c_str());
            vpi_put_value(handles[e.handle].h, &v, nullptr, vpiNoDelay);
            ++writes;
            wrote = true;
        }
        if (wrote) top->eval();
        for (size_t i = first; i < next; ++i) {
            const Event &e = events[i];
            if (!e.check) continue;
            const Handle &h = handles[e.handle];
            v.format = vpiHexStrVal;
            vpi_get_value(h.h, &v);
            std::string got = canonical(v.value.str);
            ++checks;
            if (got == e.hex) continue;
            std::string name = h.path + (h.index >= 0 ? "[" + std::to_string(h.index) + "]" : "");
            std::fprintf(stderr,
                         "native replay: %s at half period %llu is %s, the cocotb run read %s\n",
                         name.c_str(), static_cast<unsigned long long>(half), got.c_str(),
                         e.hex.c_str());
            if (!keep_going || ++mismatches >= 50) std::exit(1);
        }
    };

    // time 0: the bench's first inputs, then the clock starts high (cocotb's Clock): the
    // first rising edge sees them (the HBM model's fault tables load at that edge)
    top->clk = 0;
    top->eval();
    play(0);
    auto t_loop = std::chrono::steady_clock::now();
    for (uint64_t half = 0; half <= end; ++half) {
        main_time = half;
        ctx->time(half);
        top->clk = half % 2 == 0;
        top->eval();
        play(half);
        if (ctx->gotFinish()) fail("$finish at half period " + std::to_string(half));
    }
    auto t_end = std::chrono::steady_clock::now();
    top->final();
    if (mismatches) std::exit(1);
    if (next != events.size())
        fail(std::to_string(events.size() - next) + " events after the end of the run");
    using secs = std::chrono::duration<double>;
    std::printf("{\"cycles\": %llu, \"loop_s\": %.6f, \"startup_s\": %.6f, \"writes\": %zu, "
                "\"checks\": %zu}\n",
                static_cast<unsigned long long>(end / 2), secs(t_end - t_loop).count(),
                secs(t_loop - t_start).count(), writes, checks);
    return 0;
}
