"""Pictures of schedules: Gantt charts, Chrome traces, scaling curves, tune curves."""

from .charts import breakdown_chart as breakdown_chart
from .charts import gantt_chart as gantt_chart
from .charts import scaling_chart as scaling_chart
from .charts import tune_chart as tune_chart
from .chrome import chrome_trace_events as chrome_trace_events
