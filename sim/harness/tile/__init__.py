"""The decode tile's co-simulation harness (``docs/tile/cosim.md``,
``docs/tile/attention-path.md``), one role per module, in import order (each module imports
only modules above it):

* :mod:`.params`: a run's parameter dict (``DEFAULTS``, ``TILE_KEYS``);
* :mod:`.setup`: a co-simulation's :class:`~.setup.Setup`, its checks, prompts, DSU schedule,
  watchdog limit and timing-model configuration;
* :mod:`.cases`: the named setups tests and benchmarks share (one per CDU policy, the HBM-only
  tile, the DSU loop's runs, the speed runs);
* :mod:`.options`: a run's options as ``tricut tile run`` takes them, typed
  (:class:`~.options.TileRunOptions`), and their checked :class:`~.setup.Setup`;
* :mod:`.hbm_image`: K/V codes and their HBM image;
* :mod:`.tops`: the tiles built from a run's parameters and the Amaranth simulation tops;
* :mod:`.block_reads`: the block-read interface alone (``HbmBlockReader`` over the
  behavioural HBM);
* :mod:`.golden`: the inputs both sides share (:class:`~.golden.RunInputs`), the golden side
  (:func:`~.golden.golden_run`) and either side's :class:`~.golden.RunResult`;
* :mod:`.compare`: tile against golden, CDU against its golden model, payload decoding;
* :mod:`.loop`: the co-simulation loop both simulators run, behind a port
  (:class:`~.loop.TileLoop`);
* :mod:`.amaranth_run`: the loop in Amaranth's simulator (:func:`~.amaranth_run.cosim_run`);
* :mod:`.verilator_top`: the co-simulation top for Verilator;
* :mod:`.verilator`: its build and run;
* :mod:`.bench`: the loop's port on Verilator and the DSU cluster's rounds (simulator-side
  only);
* :mod:`.cosim`: golden run, tile run, comparison (:func:`~.cosim.simulate`,
  :class:`~.cosim.Report`).
"""
