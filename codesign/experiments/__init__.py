"""Co-design experiments: specs with sweep axes, execution (process pool or Dask), result
storage with resume, and paper-style plots."""
