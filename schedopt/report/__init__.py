"""What a person reads: tables (rich) and pictures (matplotlib) of what the stages return.

- :mod:`schedopt.report.tables`: number formats and the tables the commands print;
- :mod:`schedopt.report.charts`: Gantt charts, breakdowns, scaling and tune curves;
- :mod:`schedopt.report.chrome`: Chrome trace events of a schedule;
- :mod:`schedopt.report.validation_chart`: predicted against measured;
- :mod:`schedopt.report.aggregate`: the spans a chart draws, merged to a budget.

Import the module you need: matplotlib is loaded only by the chart modules.
"""
