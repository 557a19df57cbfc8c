import shutil

from noisescope.host import (
    HostRoot,
    estimate_hz,
    parse_cmdline,
    parse_interrupts,
    preemption_model,
    read_host_facts,
)

from ..conftest import HOSTS


def test_captured_kvm_guest():
    facts = read_host_facts(HOSTS / "kvm-guest")
    assert facts.online == (0, 1)
    assert facts.virtualization.hypervisor
    assert facts.config_hz == 250
    assert facts.preemption == "none"  # PREEMPT_DYNAMIC built with PREEMPT_NONE as default
    assert "tsc_known_freq" in facts.tsc_flags
    assert facts.rt_runtime_us == 950_000
    assert facts.hostname == "captured-host"


def test_tuned_node_topology_and_isolation():
    facts = read_host_facts(HOSTS / "tuned-node")
    assert (facts.sockets, facts.cores, facts.threads_per_core) == (2, 8, 2)
    assert facts.smt_siblings[0] == "0,8"
    assert facts.numa_nodes == {"0": "0-3,8-11", "1": "4-7,12-15"}
    assert facts.isolated_cpus == "2-7,10-15"
    assert facts.noise_parameters["nohz_full"] == "2-7,10-15"
    assert facts.preemption == "rt"
    assert facts.config_hz == 1000
    assert set(facts.governors.values()) == {"performance"}
    assert not facts.virtualization.hypervisor


def test_laptop_defaults():
    facts = read_host_facts(HOSTS / "laptop")
    assert facts.preemption == "voluntary"
    assert facts.governors["0"] == "powersave"
    assert facts.noise_parameters == {}


def test_host_facts_round_trip_through_dict():
    facts = read_host_facts(HOSTS / "tuned-node")
    assert type(facts).from_dict(facts.to_dict()) == facts


def test_hypervisor_vendor_from_cpuid_signature(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor : 0\nflags : fpu hypervisor\n")
    assert read_host_facts(tmp_path, cpuid_signature="KVMKVMKVM").virtualization.vendor == "KVM"
    assert read_host_facts(tmp_path).virtualization.hypervisor


def test_empty_root_does_not_crash(tmp_path):
    facts = read_host_facts(tmp_path)
    assert facts.online == ()
    assert facts.clocksource is None


def test_cmdline_stops_at_init_arguments():
    found = parse_cmdline("quiet isolcpus=2-3 nohz_full=2-3 -- isolcpus=9")
    assert found == {"isolcpus": "2-3", "nohz_full": "2-3"}


def test_parse_interrupts_and_delta():
    before = parse_interrupts("           CPU0       CPU1\n"
                              "  LOC:        100        200   Local timer interrupts\n"
                              "  ERR:          0\n"
                              " 36:          1          2   PCI-MSIX virtio1-req.0\n")
    after = parse_interrupts("           CPU0       CPU1\n"
                             "  LOC:        350        450   Local timer interrupts\n"
                             " 36:          1          9   PCI-MSIX virtio1-req.0\n")
    assert before.cpus == (0, 1)
    assert "ERR" not in before.counts
    assert after.delta(before)["LOC"] == {0: 250, 1: 250}
    assert after.descriptions["36"] == "PCI-MSIX virtio1-req.0"


def test_estimate_hz():
    assert estimate_hz({0: 251.0, 1: 262.0}) == 250
    assert estimate_hz({0: 1003.0}) == 1000
    assert estimate_hz({0: 40.0}) is None  # nohz_full: the tick mostly stops
    assert estimate_hz({}) is None


def test_preemption_from_debugfs(tmp_path):
    path = tmp_path / "sys/kernel/debug/sched"
    path.mkdir(parents=True)
    (path / "preempt").write_text("none voluntary (full) lazy\n")
    assert preemption_model(HostRoot(tmp_path), {}, {}, "") == "full"


def test_cpu_sets_read_as_integer_tuples():
    facts = read_host_facts(HOSTS / "tuned-node")
    assert facts.isolated == (2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15)
    assert facts.sibling_groups[0] == (0, 8) and len(facts.sibling_groups) == 8
    assert facts.node_cpus == {0: (0, 1, 2, 3, 8, 9, 10, 11), 1: (4, 5, 6, 7, 12, 13, 14, 15)}
    laptop = read_host_facts(HOSTS / "laptop")
    assert laptop.isolated == () and laptop.nohz_full == ()


def test_a_kernel_without_a_nohz_full_mask_has_no_nohz_full_cpus(tmp_path):
    """Kernels built with CONFIG_CPUMASK_OFFSTACK (Debian's, Ubuntu's) print
    an unallocated mask as "(null)": nohz_full without nohz_full= on the
    command line. That is no CPU, not a CPU list to refuse."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "laptop", root)
    (root / "sys/devices/system/cpu/nohz_full").write_text("(null)\n")
    facts = read_host_facts(root)
    assert facts.nohz_full_cpus == "" and facts.nohz_full == ()
    assert facts.online == (0, 1, 2, 3, 4, 5, 6, 7)
