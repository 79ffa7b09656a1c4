// The Verilator main of `tricut tile run --sim verilator` builds (sim/harness/tile/verilator.py):
// cocotb's scheduling loop -- the VPI regions in the order cocotb's own Verilator main calls
// them, so the bench sees the same callbacks at the same times -- with the clock driven here
// instead of by cocotb's GPI clock.
//
// Why: the GPI clock toggles through a timed VPI callback every half period (a callback
// registered, fired and freed, an inertial put, and an evaluation before the put lands), a
// fixed cost per cycle that is a quarter of a small tile's evaluation. Here the half period is
// a time slot of this loop and the clock a plain write into the model.
//
// The protocol with the bench (sim/harness/tile/bench.py, CosimBench.start):
//   +tricut_clock_ns=<period>   the clock period in ns (required);
//   the bench starts the clock by writing 1 into `clk` at time 0, as cocotb's Clock
//   (start_high) does; from the end of the time step in which `clk` is first 1, this loop
//   toggles it every half period, after that time step's timed callbacks and with their
//   writes, before its value-change callbacks and its evaluation: where the GPI clock's
//   put lands.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"

static uint64_t main_time = 0;
double sc_time_stamp() { return static_cast<double>(main_time); }

extern "C" void vlog_startup_routines_bootstrap(void);

namespace {
const uint64_t NEVER = ~0ULL;

// value-change callbacks can write signals: call them until none fires
void settle() {
    while (VerilatedVpi::callValueCbs()) {
    }
}

void wrap_up() { VerilatedVpi::callCbs(cbEndOfSimulation); }

[[noreturn]] void fail(const std::string &msg) {
    std::fprintf(stderr, "tricut cosim main: %s\n", msg.c_str());
    std::exit(2);
}

// the half clock period in simulation time steps
uint64_t half_period_steps() {
    const std::string key = "+tricut_clock_ns=";
    const char *arg = Verilated::commandArgsPlusMatch("tricut_clock_ns=");
    if (!arg || std::strncmp(arg, key.c_str(), key.size()) != 0)
        fail("no +tricut_clock_ns=<period> argument: the clock period is the run's to give");
    char *end = nullptr;
    const double period_ns = std::strtod(arg + key.size(), &end);
    if (*end || !(period_ns > 0)) fail(std::string("bad clock period: ") + arg);
    const int precision = Verilated::threadContextp()->timeprecision();  // e.g. -12: 1 ps
    const double steps = period_ns / 2 * std::pow(10.0, -9 - precision);
    if (steps < 1 || std::fabs(steps - std::round(steps)) > 1e-9)
        fail(std::string("the half period of ") + arg +
             " is not a whole number of time steps of 1e" + std::to_string(precision) + " s");
    return static_cast<uint64_t>(std::llround(steps));
}
}  // namespace

int main(int argc, char **argv) {
    Verilated::commandArgs(argc, argv);
    const std::unique_ptr<Vtop> top{new Vtop{""}};
    Verilated::fatalOnVpiError(false);  // cocotb's setting: system tasks would fail otherwise
    const uint64_t half = half_period_steps();

    vlog_startup_routines_bootstrap();
    Verilated::addExitCb([](void *) { wrap_up(); }, nullptr);
    VerilatedVpi::callCbs(cbStartOfSimulation);
    settle();

    uint64_t next_edge = NEVER;  // the clock's next toggle (NEVER until the bench starts it)
    while (!Verilated::gotFinish()) {
        // evaluate until this time step's writes (the bench's inertial puts) are all in
        do {
            do {
                top->eval_step();
                VerilatedVpi::clearEvalNeeded();
                VerilatedVpi::doInertialPuts();
                settle();
            } while (VerilatedVpi::evalNeeded());
            VerilatedVpi::callCbs(cbReadWriteSynch);
            VerilatedVpi::doInertialPuts();
            settle();
        } while (VerilatedVpi::evalNeeded());
        top->eval_end_step();
        VerilatedVpi::callCbs(cbReadOnlySynch);

        if (next_edge == NEVER && top->clk) next_edge = main_time + half;
        uint64_t next = std::min(VerilatedVpi::cbNextDeadline(), next_edge);
        if (top->eventsPending()) next = std::min(next, top->nextTimeSlot());
        if (next == NEVER) break;
        main_time = next;

        VerilatedVpi::callCbs(cbNextSimTime);
        settle();
        VerilatedVpi::callTimedCbs();
        if (main_time == next_edge) {
            // the edge lands with the timed callbacks' writes, as the GPI clock's inertial
            // put does (it lands after an evaluation that changes nothing: skipped here)
            top->clk = !top->clk;
            next_edge += half;
            VerilatedVpi::doInertialPuts();
        }
        settle();
    }

    top->final();
    wrap_up();
    return Verilated::threadContextp()->errorCount() > 0 ? 1 : 0;
}
